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
