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
