package main

import (
	"errors"
	"strings"
	"testing"
)

func TestErrorKindCountsAlikeOnce(t *testing.T) {
	a := errorKind(errors.New("stream ended without [DONE] after 1 events: EOF"))
	b := errorKind(errors.New("stream ended without [DONE] after 17 events: EOF"))
	c := errorKind(errors.New("stream ended with an error event after 1 events: data: {\"error\":{\"code\":\"upstream_timeout\"}}"))
	if a != b || a != "stream ended without [DONE] after # events: EOF" {
		t.Errorf("kinds %q and %q; want one, with the count as #", a, b)
	}
	if a == c {
		t.Errorf("an error event and a bare EOF are one kind: %q", a)
	}
	if k := errorKind(errors.New(strings.Repeat("x", 400))); len(k) != 160 {
		t.Errorf("a kind of %d bytes; want at most 160", len(k))
	}
}
