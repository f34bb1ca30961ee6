package token

import (
	"crypto/sha256"
	"testing"

	"github.com/graygate/graygate/schemas/config"
)

// TestHasBearer: a set holds every token of its lists as a digest, and
// an Authorization header carries one of them only as "Bearer <token>"
// (the scheme in any case).
func TestHasBearer(t *testing.T) {
	s := NewSet([]config.Secret{"client-a"}, nil, []config.Secret{"force-b"})
	tests := []struct {
		header string
		want   bool
	}{
		{"Bearer client-a", true},
		{"bearer force-b", true},
		{"BEARER client-a", true},
		{"Bearer client-", false},
		{"Bearer client-a ", false},
		{"Basic client-a", false},
		{"client-a", false},
		{"Bearer ", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := s.HasBearer([]byte(tt.header)); got != tt.want {
			t.Errorf("HasBearer(%q) = %v; want %v", tt.header, got, tt.want)
		}
	}
	if len(s) != 2 {
		t.Errorf("NewSet holds %d digests; want 2", len(s))
	}
	if Set(nil).HasBearer([]byte("Bearer client-a")) {
		t.Error("an empty set has a bearer token")
	}
}

// TestHas compares digests, not tokens.
func TestHas(t *testing.T) {
	s := NewSet([]config.Secret{"a", "b"})
	for tok, want := range map[string]bool{"a": true, "b": true, "c": false} {
		d := sha256.Sum256([]byte(tok))
		if got := s.Has(&d); got != want {
			t.Errorf("Has(digest of %q) = %v; want %v", tok, got, want)
		}
	}
}

// TestNamed: a bearer token names its operator ("" for the shared one);
// anything else names nobody.
func TestNamed(t *testing.T) {
	n := NewNamed("shared-token", []config.OperatorToken{{Name: "alice", Token: "alice-token"}, {Name: "bob", Token: "bob-token"}})
	for _, tt := range []struct {
		header, name string
		ok           bool
	}{
		{"Bearer shared-token", "", true},
		{"bearer alice-token", "alice", true},
		{"Bearer bob-token", "bob", true},
		{"Bearer bob-token ", "", false},
		{"Bearer alice", "", false},
		{"alice-token", "", false},
		{"", "", false},
	} {
		if name, ok := n.Bearer([]byte(tt.header)); name != tt.name || ok != tt.ok {
			t.Errorf("Bearer(%q) = %q, %v; want %q, %v", tt.header, name, ok, tt.name, tt.ok)
		}
	}
	if name, ok := (Named{}).Bearer([]byte("Bearer x")); ok || name != "" || (Named{}).Len() != 0 {
		t.Error("an empty set names someone")
	}
	if only := NewNamed("", []config.OperatorToken{{Name: "alice", Token: "t"}}); only.Len() != 1 {
		t.Errorf("Len = %d; want 1 (no shared token)", only.Len())
	}
}
