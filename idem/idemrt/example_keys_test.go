package idemrt_test

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// A key template "{a}:{b}" renders each value through KeyEscape with the
// template's separators, so two different pairs never share a key: a
// colon inside a value cannot pass for the separator.
func ExampleKeyEscape() {
	key := func(a, b string) string { return idemrt.KeyEscape(a, ":") + ":" + idemrt.KeyEscape(b, ":") }
	fmt.Println(key("a:b", "c"))
	fmt.Println(key("a", "b:c"))
	fmt.Println(key("100%", "é"))
	// Output:
	// a%3Ab:c
	// a:b%3Ac
	// 100%25:é
}

// A key over a time field is the same instant whatever the zone it was
// read in, so a unit read back from another database keeps its key.
func ExampleKeyTime() {
	utc := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	paris := utc.In(time.FixedZone("CET", 3600))
	fmt.Println(idemrt.KeyTime(utc))
	fmt.Println(idemrt.KeyTime(paris) == idemrt.KeyTime(utc))
	// Output:
	// 2026-11-22T09:00:00Z
	// true
}

// A key placeholder {sha256(a, b)} hashes each field's value with its
// length, so moving a character from one part to the next
// gives another key.
func ExampleKeySHA256() {
	fmt.Println(idemrt.KeySHA256("ab", "c") == idemrt.KeySHA256("a", "bc"))
	fmt.Println(len(idemrt.KeySHA256("ab", "c")))
	// Output:
	// false
	// 64
}
