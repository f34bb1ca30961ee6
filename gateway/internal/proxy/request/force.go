package request

import (
	"strings"

	"github.com/graygate/graygate/gateway/internal/rollout"
	"github.com/valyala/fasthttp"
)

// The rollout force header is recognised and stripped in every spelling
// (SPEC §6.1, §11 rev. 4): in any case, and with '_' for '-', as the
// credential headers are, since a server that maps header names to
// variables reads X_Gray_Rollout as X-Gray-Rollout.

// isForceHeader reports whether k is a rollout force header in any
// spelling (SPEC §11 rev. 4: case, '_' for '-').
func (in *Intake) isForceHeader(k []byte) bool {
	for _, name := range in.forceHeaders {
		if forceNameIs(k, name) {
			return true
		}
	}
	return false
}

// forceOf reads the force header name (forceNameIs form) of h in every
// spelling, as the stripping does: a header the upstream never gets is
// one the gateway reads. Spellings that disagree, or a value that is
// neither true nor false, force nothing: the request is assigned as if
// it had none.
func forceOf(h *fasthttp.RequestHeader, name string) rollout.Force {
	force, seen := rollout.NoForce, false
	for k, v := range h.All() {
		if !forceNameIs(k, name) {
			continue
		}
		f := rollout.ParseForce(v)
		if seen && f != force {
			return rollout.NoForce
		}
		force, seen = f, true
	}
	return force
}

// foldName returns a header name in forceNameIs form: lower case, '-'
// for '_'. Called when the intake is built, never per request.
func foldName(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// forceNameIs reports whether the header name b is name (lower case,
// '-' for '_'), in any case and with '_' for any '-': the comparison the
// credential headers get, kept beside the force header.
func forceNameIs(b []byte, name string) bool {
	if len(b) != len(name) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}
