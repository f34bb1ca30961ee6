package serve

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/graygate/graygate/schemas/config"
)

// TestSampleCutKeepsText: a sample cut at gateway.sample_max_bytes is
// cut between characters, so an answer that is text stays text (SPEC §7:
// payload when valid UTF-8, else payload_base64). Cut inside a "€" (3
// bytes), two answers in three went out as base64.
func TestSampleCutKeepsText(t *testing.T) {
	s := &Flow{gateway: &config.Gateway{SampleMaxBytes: 200}}
	for _, lead := range []string{"", "a", "aa"} {
		raw := []byte(`{"content":"` + lead + strings.Repeat("€", 70) + `"}`)
		got, truncated := s.fitPayload(raw, nil)
		if !truncated || !utf8.Valid(got) || len(got) > 200 || len(got) < 198 || !strings.HasPrefix(string(raw), string(got)) {
			t.Errorf("lead %q: %d bytes, valid UTF-8 %v, truncated %v; want 198-200 bytes of the answer's text, truncated", lead, len(got), utf8.Valid(got), truncated)
		}
	}
	// Bytes that were not text are cut where the limit says.
	bin := append([]byte{0xff, 0xfe}, make([]byte, 300)...)
	if got, truncated := s.fitPayload(bin, nil); len(got) != 200 || !truncated {
		t.Errorf("binary: %d bytes, truncated %v; want 200, true", len(got), truncated)
	}
}
