package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// TestSignAndVerify: a signature verifies over the exact bytes it was
// made for and names its signer; a changed byte, another signer's name,
// a malformed header or none at all does not verify.
func TestSignAndVerify(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	other, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	otherPub, _ := other.PublicKey()
	body := []byte(`{"specversion":"1.0","data":{"deployment":"d"}}`)
	h, err := Sign(kp, body)
	if err != nil {
		t.Fatal(err)
	}
	if signer, err := VerifySignature(h, body); err != nil || signer != pub {
		t.Fatalf("VerifySignature = %q, %v; want %s", signer, err, pub)
	}
	changed := append([]byte{}, body...)
	changed[len(changed)-3] = 'e'
	swapped := nats.Header{HeaderSignature: h[HeaderSignature], HeaderSigner: []string{otherPub}}
	for _, tt := range []struct {
		name string
		h    nats.Header
		body []byte
		want error
	}{
		{"a changed byte", h, changed, ErrBadSignature},
		{"another signer named", swapped, body, ErrBadSignature},
		{"not base64url", nats.Header{HeaderSignature: []string{"***"}, HeaderSigner: []string{pub}}, body, ErrBadSignature},
		{"a signer that is no key", nats.Header{HeaderSignature: h[HeaderSignature], HeaderSigner: []string{"alice"}}, body, ErrBadSignature},
		{"no signature", nats.Header{HeaderSigner: []string{pub}}, body, ErrUnsigned},
		{"no headers", nil, body, ErrUnsigned},
	} {
		if _, err := VerifySignature(tt.h, tt.body); err == nil || !strings.Contains(err.Error(), tt.want.Error()) {
			t.Errorf("%s: VerifySignature = %v; want %v", tt.name, err, tt.want)
		}
	}
	s := NewSigners([]string{pub}, []string{otherPub}, nil)
	if !s.Required() || !s.May(ActorAnalyzer, pub) || s.May(ActorAdmin, pub) || s.May(ActorConfig, otherPub) || s.May(ActorAnalyzer, "") {
		t.Errorf("Signers %v decide wrongly", s)
	}
	if (Signers{}).Required() || NewSigners(nil, nil, nil).Required() {
		t.Error("empty signers are required")
	}
}

// TestOperatorRules: only an admin change names an operator, and the name
// is [a-z0-9_.-]{1,32}.
func TestOperatorRules(t *testing.T) {
	for _, tt := range []struct {
		actor    Actor
		operator string
		ok       bool
	}{
		{ActorAdmin, "alice", true},
		{ActorAdmin, "ops.team_1-b", true},
		{ActorAdmin, "", true},
		{ActorAdmin, "Alice", false},
		{ActorAdmin, strings.Repeat("a", 33), false},
		{ActorAnalyzer, "alice", false},
		{ActorConfig, "alice", false},
	} {
		r := &RolloutChanged{Deployment: "d", Percentage: 1, Status: StatusActive, Reason: "r", Actor: tt.actor, Operator: tt.operator}
		if err := r.Check(); (err == nil) != tt.ok {
			t.Errorf("actor %s operator %q: Check = %v; want ok %v", tt.actor, tt.operator, err, tt.ok)
		}
		b, _ := json.Marshal(r)
		if err := Validate(TypeRolloutChanged, b); (err == nil) != tt.ok {
			t.Errorf("actor %s operator %q: the JSON Schema says %v; want ok %v", tt.actor, tt.operator, err, tt.ok)
		}
	}
}
