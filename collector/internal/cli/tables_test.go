package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// hostile holds what a table cell must never pass to a terminal: an
// escape sequence, a right-to-left override, an isolate, a line break.
const hostile = "a\x1b[2Jb\u202ec\u2067d\ne"

// noRawControls fails when out passes a control or bidirectional
// character to the terminal besides the table's own line feeds, or does
// not show the hostile text escaped at least min times.
func noRawControls(t *testing.T, table, out string, min int) {
	t.Helper()
	for _, r := range out {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("%s passes U+%04X to the terminal:\n%s", table, r, out)
		}
	}
	// A table cell folds the line break into a space; a field on a line
	// of its own shows it escaped.
	if n := strings.Count(out, `a\x1b[2Jb\u202ec\u2067d`); n < min {
		t.Errorf("%s shows the hostile text escaped %d times; want at least %d:\n%s", table, n, min, out)
	}
}

func TestSamplesTableEscapes(t *testing.T) {
	var out bytes.Buffer
	s := store.SampleSummary{EventID: hostile, OccurredAt: time.Now(), Deployment: hostile, Arm: hostile, Reason: hostile,
		FirstError: &events.ValidationError{Field: hostile, Description: hostile}, ErrorCount: 1, RequestID: hostile}
	if err := writeTable(&out, store.SamplePage{Samples: []store.SampleSummary{s}}); err != nil {
		t.Fatal(err)
	}
	noRawControls(t, "samples list", out.String(), 5)
}

func TestSampleShowEscapes(t *testing.T) {
	var out bytes.Buffer
	s := store.Sample{SampleSummary: store.SampleSummary{EventID: hostile, Deployment: hostile, Arm: hostile, Reason: hostile,
		Outcome: string(events.OutcomeSchemaViolationBoth), UpstreamModel: hostile, RequestID: hostile, PromptHash: hostile, Source: hostile},
		ValidationErrors: []events.ValidationError{{Field: hostile, Description: hostile}}, Payload: hostile, Raw: []byte(hostile),
		PrimaryValidationErrors: []events.ValidationError{{Field: hostile, Description: hostile}}, PrimaryPayload: hostile, PrimaryRaw: []byte(hostile)}
	if err := writeSample(&out, s); err != nil {
		t.Fatal(err)
	}
	noRawControls(t, "samples show", out.String(), 12)
}

func TestRolloutsTableEscapes(t *testing.T) {
	var out bytes.Buffer
	e := store.RolloutEvent{OccurredAt: time.Now(), Status: hostile, Actor: hostile, Operator: hostile, Reason: hostile,
		Trigger: &events.GateTrigger{Gate: events.Gate(hostile)}}
	if err := writeRollouts(&out, "d", []store.RolloutEvent{e}); err != nil {
		t.Fatal(err)
	}
	noRawControls(t, "rollouts history", out.String(), 5)
	out.Reset()
	writeRollouts(&out, hostile, nil)
	noRawControls(t, "rollouts history of nothing", out.String(), 1)
}

func TestDeadLettersTableEscapes(t *testing.T) {
	var out bytes.Buffer
	d := store.DeadLetter{ID: 1, EventID: hostile, EventType: hostile, Stream: hostile, Subject: hostile, Error: hostile, Message: []byte(hostile)}
	if err := writeDeadLetters(&out, []store.DeadLetter{d}); err != nil {
		t.Fatal(err)
	}
	noRawControls(t, "deadletters list", out.String(), 3)
	out.Reset()
	if err := writeDeadLetter(&out, d); err != nil {
		t.Fatal(err)
	}
	noRawControls(t, "deadletters show", out.String(), 6)
}
