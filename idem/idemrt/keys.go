package idemrt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// KeyEscape makes key rendering injective: '%' and the separator
// characters the key template uses around its placeholders are
// percent-encoded inside values (each byte of a character's UTF-8 form),
// so "{a}:{b}" can never render the same for two different (a, b), and a
// value that was valid UTF-8 stays so, whatever the separators.
func KeyEscape(s, seps string) string {
	if !strings.ContainsAny(s, seps) && !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == '%' || (r != utf8.RuneError || n > 1) && strings.ContainsRune(seps, r) {
			for _, c := range []byte(s[:n]) {
				b.WriteByte('%')
				b.WriteString(strings.ToUpper(hex.EncodeToString([]byte{c})))
			}
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// The key* functions render one field value into a key, one per spec type.

func KeyInt(v int64) string     { return strconv.FormatInt(v, 10) }
func KeyFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
func KeyBool(v bool) string     { return strconv.FormatBool(v) }
func KeyBytes(v []byte) string  { return hex.EncodeToString(v) }

// KeyTime renders an instant the same way whatever its zone.
func KeyTime(v time.Time) string { return v.UTC().Format(time.RFC3339Nano) }

// KeySHA256 hashes parts with their lengths, so ("ab","c") and ("a","bc") differ.
func KeySHA256(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SQLiteTimeFormat stores instants as fixed-width UTC text, so SQLite's text
// comparison (newer_wins, watermark max) orders them correctly.
const SQLiteTimeFormat = "2006-01-02T15:04:05.000000000Z"

func SQLiteTime(t time.Time) string { return t.UTC().Format(SQLiteTimeFormat) }

func ParseSQLiteTime(s string) (time.Time, error) { return time.Parse(SQLiteTimeFormat, s) }
