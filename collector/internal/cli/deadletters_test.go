package cli_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

func TestDeadLetters(t *testing.T) {
	pool, url := testenv.Pool(t, store.NewPool, store.Migrate)
	t.Setenv("DATABASE_URL", url)
	if out, err := run(t, "deadletters", "list"); err != nil || out != "no dead letters\n" {
		t.Errorf("deadletters list on an empty table = %q, %v", out, err)
	}
	w := store.NewWriter(pool, store.Options{})
	msg := []byte(`{"specversion":"1.0","data":{"reason":"schema\u0000drift"}}` + "\x1b[2J")
	for i, id := range []string{"0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0b", "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0c"} {
		_, err := w.WriteDeadLetter(context.Background(), store.DeadLetter{EventID: id, EventType: "graygate.rollout.changed",
			Stream: "GRAYGATE_ROLLOUT", Sequence: uint64(40 + i), Subject: "graygate.rollout.qwen-32k", Message: msg,
			Error: `insert 1 rollout_events: ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`})
		if err != nil {
			t.Fatal(err)
		}
	}
	out, err := run(t, "deadletters", "list", "--limit", "1")
	if err != nil || !strings.Contains(out, "0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0c") || strings.Contains(out, "9c0b") ||
		!strings.Contains(out, "SQLSTATE") && !strings.Contains(out, "invalid byte sequence") {
		t.Errorf("deadletters list --limit 1 = %q, %v; want the newest only", out, err)
	}
	out, err = run(t, "deadletters", "list", "--json")
	var list struct {
		Data []store.DeadLetter `json:"data"`
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Data) != 2 || string(list.Data[1].Message) != string(msg) ||
		list.Data[1].ReceivedAt.After(time.Now()) {
		t.Errorf("deadletters list --json = %s, %v", out, err)
	}
	id := list.Data[1].ID
	if out, err = run(t, "deadletters", "show", "--raw", strconvI(id)); err != nil || out != string(msg) {
		t.Errorf("deadletters show --raw = %q, %v; want the message byte for byte", out, err)
	}
	out, err = run(t, "deadletters", "show", strconvI(id))
	if err != nil || strings.Contains(out, "\x1b") || !strings.Contains(out, "GRAYGATE_ROLLOUT (sequence 40)") || !strings.Contains(out, `\x1b[2J`) {
		t.Errorf("deadletters show = %q, %v; want its fields and the message with controls escaped", out, err)
	}
	if _, err := run(t, "deadletters", "show", "99"); err == nil || !strings.Contains(err.Error(), "no dead letter has id 99") {
		t.Errorf("deadletters show 99 = %v", err)
	}
	if _, err := run(t, "deadletters", "show", "x"); err == nil {
		t.Error("deadletters show x: no error")
	}
}

func strconvI(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestRolloutsHistory(t *testing.T) {
	pool, url := testenv.Pool(t, store.NewPool, store.Migrate)
	t.Setenv("DATABASE_URL", url)
	w := store.NewWriter(pool, store.Options{})
	at := time.Now().Add(-time.Hour)
	r := testenv.Rollout("qwen-32k", 4)
	stream := true
	r.Trigger = &events.GateTrigger{Gate: events.GateTTFTP99, Stream: &stream, Estimate: 2.5, Bound: 2.1, Threshold: 2, WindowSeconds: 600}
	held := true
	hold := &events.RolloutChanged{Deployment: "qwen-32k", Percentage: 5, Status: events.StatusActive, Reason: "freeze",
		Actor: events.ActorAdmin, Operator: "alice", Hold: &held, Revision: 2}
	// In the log's order, which the history follows (each with its
	// stream sequence, as the consumer stores it).
	evs := []store.Event{testenv.Event[store.Event](t, hold, at.Add(-time.Minute), ""),
		testenv.Event[store.Event](t, testenv.Rollout("qwen-32k", 3), at, ""), testenv.Event[store.Event](t, r, at.Add(time.Minute), "")}
	for i := range evs {
		evs[i].Sequence = uint64(i + 1)
	}
	if _, err := w.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "rollouts", "history", "qwen-32k")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 4 || len(strings.Fields(lines[3])) < 8 || !strings.Contains(lines[1], "ttft_p99[stream] 2.5 (bound 2.1, threshold 2) over 600s") ||
		!strings.Contains(lines[2], "schema_failure_rate 0.02 (bound 0.011, threshold 0) over 300s") ||
		!slices.Equal(strings.Fields(lines[3])[5:8], []string{"admin", "alice", "held"}) {
		t.Errorf("rollouts history = %q, %v; want the newest first with each trigger's estimate, bound and threshold, "+
			"and the hold with its operator", out, err)
	}
	out, err = run(t, "rollouts", "history", "qwen-32k", "--json", "--limit", "1")
	var page struct {
		Data []store.RolloutEvent `json:"data"`
	}
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Data) != 1 || page.Data[0].Trigger.Bound != 2.1 || !*page.Data[0].Trigger.Stream {
		t.Errorf("rollouts history --json --limit 1 = %s, %v", out, err)
	}
}

// TestRolloutsHistoryShowsTextEscaped: a reason stored with a
// right-to-left override, an escape sequence and a NUL (which Postgres
// keeps as U+FFFD) is shown on one row with each made visible, never
// interpreted (SPEC §8).
func TestRolloutsHistoryShowsTextEscaped(t *testing.T) {
	pool, url := testenv.Pool(t, store.NewPool, store.Migrate)
	t.Setenv("DATABASE_URL", url)
	r := testenv.Rollout("qwen-32k", 4)
	r.Reason = "promote \u202egnp.exe\x00 \x1b[2J\nnext line"
	if _, err := store.NewWriter(pool, store.Options{}).Write(context.Background(),
		[]store.Event{testenv.Event[store.Event](t, r, time.Now().Add(-time.Hour), "")}); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "rollouts", "history", "qwen-32k")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 || !strings.Contains(lines[1], `promote \u202egnp.exe`+"\uFFFD"+` \x1b[2J\x0anext line`) ||
		strings.ContainsAny(out, "\u202e\x00\x1b") {
		t.Errorf("rollouts history = %q, %v; want one row with U+202E, ESC and the line feed escaped", out, err)
	}
}
