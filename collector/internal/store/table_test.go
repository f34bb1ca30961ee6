package store

import "testing"

// TestWithoutNUL: a row's text values lose their NULs, nothing else does.
func TestWithoutNUL(t *testing.T) {
	payload := []byte("raw\x00")
	row := withoutNUL([]any{"a\x00b", payload, 7, nil, "plain"})
	if row[0] != "a\uFFFDb" || string(row[1].([]byte)) != "raw\x00" || row[2] != 7 || row[3] != nil || row[4] != "plain" {
		t.Errorf("withoutNUL = %q; want the NUL of the text only replaced", row)
	}
}
