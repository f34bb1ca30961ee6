package token

import (
	"testing"

	"github.com/graygate/graygate/schemas/config"
)

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
