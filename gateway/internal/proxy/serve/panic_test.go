package serve

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// TestStreamPanicEndsOneStream: a panic in a stream's relay (a bug) ends
// that stream with an error, so fasthttp closes its connection, and is
// logged and counted; it does not end the process.
func TestStreamPanicEndsOneStream(t *testing.T) {
	var logs bytes.Buffer
	s := &Flow{log: slog.New(slog.NewJSONHandler(&logs, nil)), tel: telemetry.New()}
	relay := func() (_ int64, err error) {
		defer s.recoverStream(&err)
		var b []byte
		_ = b[3] // out of range: the bug
		return 0, nil
	}
	if _, err := relay(); err == nil || !strings.Contains(err.Error(), "stream relay panicked") {
		t.Errorf("relay returned %v; want the panic as an error", err)
	}
	if got := s.tel.Set().GetOrCreateCounter("graygate_panics_total").Get(); got != 1 {
		t.Errorf("graygate_panics_total = %d; want 1", got)
	}
	if !strings.Contains(logs.String(), "panic relaying a stream") {
		t.Errorf("the log lacks the panic:\n%s", logs.String())
	}
}
