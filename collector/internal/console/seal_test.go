package console

import (
	"bytes"
	"strings"
	"testing"
)

// TestSeal: a sealed token opens only under its key, for its row and its
// operator, unaltered; the same token sealed twice differs (random
// nonces) and never shows in the sealed bytes.
func TestSeal(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	s, err := newSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	id := bytes.Repeat([]byte{1}, 32)
	const tok = "alice-admin-token-0123456789abcdef"
	sealed := s.seal(tok, id, "alice")
	if got, err := s.open(sealed, id, "alice"); err != nil || got != tok {
		t.Fatalf("open = %q, %v; want the token", got, err)
	}
	if bytes.Equal(sealed, s.seal(tok, id, "alice")) {
		t.Error("two sealings are equal: the nonce is not random")
	}
	if strings.Contains(string(sealed), "alice-admin") {
		t.Error("the sealed bytes hold the token")
	}
	other, _ := newSealer(bytes.Repeat([]byte{8}, 32))
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() (string, error){
		"another key":      func() (string, error) { return other.open(sealed, id, "alice") },
		"another row":      func() (string, error) { return s.open(sealed, bytes.Repeat([]byte{2}, 32), "alice") },
		"another operator": func() (string, error) { return s.open(sealed, id, "bob") },
		"altered":          func() (string, error) { return s.open(tampered, id, "alice") },
		"short":            func() (string, error) { return s.open(sealed[:10], id, "alice") },
		"empty":            func() (string, error) { return s.open(nil, id, "alice") },
	} {
		if got, err := open(); err == nil || got != "" {
			t.Errorf("open with %s = %q, %v; want errUnsealed", name, got, err)
		}
	}
	if _, err := newSealer(key[:31]); err == nil {
		t.Error("a 31-byte key is accepted")
	}
}
