// Package token holds the gateway's bearer tokens (client, force and
// admin), kept and compared as SHA-256 digests in constant time (SPEC
// §11): the comparison takes as long for every token and leaks neither a
// prefix nor the length.
package token

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/graygate/graygate/schemas/config"
)

// Digest is a token's SHA-256.
type Digest = [sha256.Size]byte

// Set is a set of bearer tokens as digests.
type Set []Digest

// NewSet returns the set of every token of the lists.
func NewSet(ts ...[]config.Secret) Set {
	var out Set
	for _, list := range ts {
		for _, t := range list {
			out = append(out, sha256.Sum256([]byte(t.Reveal())))
		}
	}
	return out
}

// Has reports whether d is one of the set's digests, comparing every
// one of them whatever matches.
func (s Set) Has(d *Digest) bool {
	found := 0
	for i := range s {
		found |= subtle.ConstantTimeCompare(d[:], s[i][:])
	}
	return found == 1
}

// HasBearer reports whether the Authorization header value h carries a
// bearer token of the set.
func (s Set) HasBearer(h []byte) bool {
	if len(s) == 0 {
		return false
	}
	tok, ok := Bearer(h)
	if !ok {
		return false
	}
	d := sha256.Sum256(tok)
	return s.Has(&d)
}

// Bearer returns the bearer token of an Authorization header value.
func Bearer(h []byte) ([]byte, bool) {
	if len(h) > 7 && bytes.EqualFold(h[:7], []byte("bearer ")) {
		return h[7:], true
	}
	return nil, false
}

// UnauthBodyLimit is the body fasthttp reads of a request whose headers
// carry no valid token: the handler answers 401 without it, and a larger
// body is refused before it is read (fasthttp's Server.HeaderReceived).
const UnauthBodyLimit = 1

// Named is a set of admin tokens, each with its operator's name (SPEC §3
// rev. 4): gateway.admin_tokens_env's name=token entries and, as the
// operator "", the shared admin token. Kept and compared as Set is.
type Named struct {
	digests Set
	names   []string
}

// NewNamed returns the admin tokens: shared (when not empty) as operator
// "", and each operator's.
func NewNamed(shared config.Secret, ops []config.OperatorToken) Named {
	var n Named
	if shared != "" {
		n.digests = append(n.digests, sha256.Sum256([]byte(shared.Reveal())))
		n.names = append(n.names, "")
	}
	for _, op := range ops {
		n.digests = append(n.digests, sha256.Sum256([]byte(op.Token.Reveal())))
		n.names = append(n.names, op.Name)
	}
	return n
}

// Len is how many tokens the set holds.
func (n Named) Len() int { return len(n.digests) }

// Bearer returns the operator whose token the Authorization header value
// h carries, comparing every digest whatever matches; ok is false when
// none does.
func (n Named) Bearer(h []byte) (operator string, ok bool) {
	if len(n.digests) == 0 {
		return "", false
	}
	tok, ok := Bearer(h)
	if !ok {
		return "", false
	}
	d := sha256.Sum256(tok)
	match := -1
	for i := range n.digests {
		match = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(d[:], n.digests[i][:]), i, match)
	}
	if match < 0 {
		return "", false
	}
	return n.names[match], true
}
