package events_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

func TestSetPayload(t *testing.T) {
	tests := []struct {
		name          string
		raw           []byte
		max           int
		wantText      string
		wantBase64    string
		wantTruncated bool
	}{
		{"empty", nil, 10, "", "", false},
		{"text", []byte(`{"a":1}`), 0, `{"a":1}`, "", false},
		{"text at the cap", []byte(`abcd`), 4, "abcd", "", false},
		{"text over the cap", []byte(`abcdef`), 4, "abcd", "", true},
		{"cut inside a character backs off", []byte("aé€"), 4, "aé", "", true},
		{"cut inside a 4-byte character", []byte("a😀"), 3, "a", "", true},
		{"binary", []byte{0xff, 0x00, 'a'}, 0, "", "/wBh", false},
		{"binary over the cap", []byte{0xff, 0x00, 'a', 'b'}, 2, "", "/wA=", true},
		{"invalid after the cut is not looked at", []byte{'a', 'b', 0xff}, 2, "ab", "", true},
		{"NUL is text", []byte("a\x00b"), 0, "a\x00b", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s events.SampleMalformed
			s.Payload, s.PayloadBase64, s.PayloadTruncated = "stale", "stale", true
			s.SetPayload(tt.raw, tt.max)
			if s.Payload != tt.wantText || s.PayloadBase64 != tt.wantBase64 || s.PayloadTruncated != tt.wantTruncated || s.PayloadBytes != int64(len(tt.raw)) {
				t.Errorf("SetPayload(%q, %d) = payload %q base64 %q truncated %v bytes %d; want %q %q %v %d",
					tt.raw, tt.max, s.Payload, s.PayloadBase64, s.PayloadTruncated, s.PayloadBytes,
					tt.wantText, tt.wantBase64, tt.wantTruncated, len(tt.raw))
			}
			got, err := s.RawPayload()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(tt.raw, got) {
				t.Errorf("RawPayload() = %q; want a prefix of %q", got, tt.raw)
			}
		})
	}
}

func TestSetPayloadPassesCheck(t *testing.T) {
	base := *full()[2].(*events.SampleMalformed)
	for _, raw := range [][]byte{nil, []byte("x"), []byte(strings.Repeat("ü", 1000)), {0xc3}, bytes.Repeat([]byte{0xff}, 50)} {
		s := base
		s.SetPayload(raw, 33)
		if err := s.Check(); err != nil {
			t.Errorf("SetPayload(%q, 33) then Check() = %v", raw, err)
		}
	}
}
