package filter

import (
	"encoding/binary"
	"testing"
)

// TestPlain: str's eight-byte skip stops at every byte that a string's
// byte-by-byte reading must see — a quote, a backslash, a control
// character, and (while the string is ASCII) a byte of a multi-byte
// character — in any lane, whatever the other lanes hold, and at no
// other byte.
func TestPlain(t *testing.T) {
	for _, fill := range []byte{'a', ' ', 0x7f, 0x80, 0xff, '!', '#', '[', ']'} {
		for lane := range 8 {
			for b := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[lane] = byte(b)
				for _, ascii := range []bool{true, false} {
					want := true
					for _, c := range w {
						if c == '"' || c == '\\' || c < 0x20 || (ascii && c >= 0x80) {
							want = false
						}
					}
					if got := plain(binary.LittleEndian.Uint64(w[:]), ascii); got != want {
						t.Fatalf("plain(% x, ascii %v) = %v; want %v", w, ascii, got, want)
					}
				}
			}
		}
	}
}
