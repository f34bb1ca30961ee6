package events

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Headers of a signed rollout event or heartbeat (SPEC §7 rev. 4): the
// signature of the message body, byte for byte, and the signer's public
// nkey.
const (
	HeaderSignature = "Graygate-Signature" // base64url (no padding) Ed25519 signature of the body
	HeaderSigner    = "Graygate-Signer"    // the signer's public nkey
)

// SubjectHeartbeat is the core NATS subject (not stored) on which the
// analyzer that holds the lease publishes a signed Heartbeat every
// interval; gateways subscribe (SPEC §11 rev. 4).
const SubjectHeartbeat = "graygate.heartbeat"

// Heartbeat is the body of a message on SubjectHeartbeat: who holds the
// analyzer lease, and when the heartbeat was sent by its clock.
type Heartbeat struct {
	Holder string    `json:"holder"`
	Time   time.Time `json:"time"`
}

// Errors of VerifySignature.
var (
	// ErrUnsigned: the message carries no signature or no signer.
	ErrUnsigned = errors.New("not signed")
	// ErrBadSignature: the signature does not verify against the signer.
	ErrBadSignature = errors.New("signature does not verify")
)

// Sign returns the headers that sign body with key: HeaderSignature and
// HeaderSigner. The key must hold a seed.
func Sign(key nkeys.KeyPair, body []byte) (nats.Header, error) {
	pub, err := key.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("sign: public key: %w", err)
	}
	sig, err := key.Sign(body)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	h := nats.Header{}
	h.Set(HeaderSignature, base64.RawURLEncoding.EncodeToString(sig))
	h.Set(HeaderSigner, pub)
	return h, nil
}

// VerifySignature checks that h signs body and returns the signer's public
// key: ErrUnsigned when either header is missing, ErrBadSignature when the
// signer is not a public nkey or the signature does not verify.
func VerifySignature(h nats.Header, body []byte) (signer string, err error) {
	signer, sig := h.Get(HeaderSigner), h.Get(HeaderSignature)
	if signer == "" || sig == "" {
		return "", ErrUnsigned
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		// Tolerate padding: base64url with '='.
		if raw, err = base64.URLEncoding.DecodeString(sig); err != nil {
			return signer, fmt.Errorf("%w: %s is not base64url", ErrBadSignature, HeaderSignature)
		}
	}
	pub, err := nkeys.FromPublicKey(signer)
	if err != nil {
		return signer, fmt.Errorf("%w: %s is not a public nkey", ErrBadSignature, HeaderSigner)
	}
	if err := pub.Verify(body, raw); err != nil {
		return signer, ErrBadSignature
	}
	return signer, nil
}

// Signers is nats.rollout_signers: per actor, the public nkeys allowed to
// sign its rollout events (the analyzer's also sign heartbeats). Empty
// means rollout events are unsigned and accepted as in rev. 3.
type Signers map[Actor][]string

// NewSigners returns the signers of nats.rollout_signers: the public keys
// listed for each actor.
func NewSigners(analyzer, admin, config []string) Signers {
	s := Signers{}
	for actor, keys := range map[Actor][]string{ActorAnalyzer: analyzer, ActorAdmin: admin, ActorConfig: config} {
		if len(keys) > 0 {
			s[actor] = keys
		}
	}
	return s
}

// Required reports whether events must be signed (any signer is listed).
func (s Signers) Required() bool {
	for _, keys := range s {
		if len(keys) > 0 {
			return true
		}
	}
	return false
}

// May reports whether signer may author events of actor.
func (s Signers) May(actor Actor, signer string) bool {
	return signer != "" && slices.Contains(s[actor], signer)
}
