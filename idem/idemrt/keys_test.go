package idemrt

import (
	"testing"
	"time"
)

func TestKeyEscapeIsInjective(t *testing.T) {
	render := func(a, b string) string { return KeyEscape(a, ":") + ":" + KeyEscape(b, ":") }
	pairs := [][2]string{{"x:y", "z"}, {"x", "y:z"}, {"x%3Ay", "z"}, {"x", "y%3Az"}, {"x%", "y"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := render(p[0], p[1])
		if prev, ok := seen[k]; ok {
			t.Fatalf("%q and %q both render %q", prev, p, k)
		}
		seen[k] = p
	}
	if got := KeyEscape("inv-1", ":"); got != "inv-1" {
		t.Errorf("plain value changed: %q", got)
	}
}

func TestKeySHA256SeparatesParts(t *testing.T) {
	if KeySHA256("ab", "c") == KeySHA256("a", "bc") {
		t.Fatal("length prefix missing")
	}
}

func TestTimesRenderByInstant(t *testing.T) {
	utc := time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)
	for _, zone := range []string{"America/New_York", "Asia/Kolkata", "Pacific/Chatham"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skip(err)
		}
		if KeyTime(utc.In(loc)) != KeyTime(utc) || SQLiteTime(utc.In(loc)) != SQLiteTime(utc) {
			t.Errorf("%s renders differently", zone)
		}
		back, err := ParseSQLiteTime(SQLiteTime(utc.In(loc)))
		if err != nil || !back.Equal(utc) {
			t.Errorf("%s: round trip %v, %v", zone, back, err)
		}
	}
	early, late := SQLiteTime(utc), SQLiteTime(utc.Add(time.Nanosecond))
	if !(early < late) {
		t.Errorf("text order broken: %s !< %s", early, late)
	}
}

// A separator outside ASCII is escaped as a character: every byte of its
// UTF-8 form, and no byte of another character that shares its lead byte
// ("¢" and "·" both start with 0xC2), so escaped values stay valid UTF-8.
func TestKeyEscapeUnicodeSeparator(t *testing.T) {
	cases := map[string]string{
		"ünïcødé-✓": "ünïcødé-✓",
		"a·b":       "a%C2%B7b",
		"¢·%":       "¢%C2%B7%25",
	}
	for in, want := range cases {
		if got := KeyEscape(in, "·"); got != want {
			t.Errorf("KeyEscape(%q, \"·\") = %q, want %q", in, got, want)
		}
	}
}
