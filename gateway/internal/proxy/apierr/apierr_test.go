package apierr

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// TestMarshal: the OpenAI envelope, with param null unless the error
// names one.
func TestMarshal(t *testing.T) {
	e := &Error{Status: 400, Code: CodeBadRequest, Type: "invalid_request_error", Msg: "no"}
	if got, want := string(Marshal(e)), `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":"bad_request"}}`; got != want {
		t.Errorf("Marshal = %s; want %s", got, want)
	}
	e.Param = "temperature"
	if got := string(Marshal(e)); !strings.Contains(got, `"param":"temperature"`) {
		t.Errorf("Marshal with a param = %s", got)
	}
}

// TestAs: the one place a handler's error becomes a status and a code.
func TestAs(t *testing.T) {
	own := &Error{Status: 409, Code: "revision_conflict"}
	tests := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"the gateway's own, wrapped", fmt.Errorf("put: %w", own), 409, "revision_conflict"},
		{"a body over the limit", fiber.ErrRequestEntityTooLarge, 413, CodePayloadTooLarge},
		{"no route", fiber.ErrNotFound, 404, CodeNotFound},
		{"a method not allowed", fiber.ErrMethodNotAllowed, 405, CodeMethodNotAllowed},
		{"another 4xx", fiber.ErrUnsupportedMediaType, 415, CodeBadRequest},
		{"a fiber 5xx", fiber.ErrServiceUnavailable, 500, CodeInternal},
		{"anything else", errors.New("boom"), 500, CodeInternal},
	}
	for _, tt := range tests {
		e := As(tt.err)
		if e.Status != tt.status || e.Code != tt.code {
			t.Errorf("%s: As = %d %s; want %d %s", tt.name, e.Status, e.Code, tt.status, tt.code)
		}
	}
	if e := As(errors.New("boom")); e.Msg != "internal gateway error" || !errors.Is(e, e.Cause) {
		t.Errorf("an unknown error is shown as %q, cause %v; want its cause kept for the log only", e.Msg, e.Cause)
	}
	if !TooLarge(fmt.Errorf("read: %w", fiber.ErrRequestEntityTooLarge)) || TooLarge(fiber.ErrNotFound) {
		t.Error("TooLarge does not tell fiber's 413 alone")
	}
}

// TestClip: a client's or an upstream's text in an error message is
// printable and cut at n bytes.
func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"a\nb\x00c", 10, "a b c"},
		{"abcdef", 3, "abc…"},
		{"éé", 4, "éé"},
		{"ééé", 5, "éé…"},
		{"", 10, "(empty body)"},
		{"\xff", 10, " "},
		{"evil\u202egpt\u2066", 20, "evil gpt "}, // bidirectional formatting: spaces too (SPEC §11 rev. 4)
		{"c1\u0085", 10, "c1 "},
	}
	for _, tt := range tests {
		if got := Clip(tt.in, tt.n); got != tt.want {
			t.Errorf("Clip(%q, %d) = %q; want %q", tt.in, tt.n, got, tt.want)
		}
	}
	if got := QuoteShort([]byte("gpt")); got != `"gpt"` {
		t.Errorf("QuoteShort = %s", got)
	}
}
