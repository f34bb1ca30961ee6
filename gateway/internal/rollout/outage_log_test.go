package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graygate/graygate/scripts/testenv"
)

// lines keeps the messages of a test's log records.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	l.all = append(l.all, s)
	l.mu.Unlock()
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

func (l *lines) starting(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.all {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// Cut off from NATS, the rollout log retries every second but says so
// once, naming the server and since when, reminds at most every
// unavailableReminder, and says when it is back.
func TestRolloutLogOutageIsQuiet(t *testing.T) {
	old := unavailableReminder
	unavailableReminder = 2 * time.Second
	defer func() { unavailableReminder = old }()
	ns := testenv.StartNATS(t)
	nc, err := nats.Connect(ns.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.ReconnectBufSize(-1))
	testenv.Must(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	testenv.Streams(t, js)
	logs := &lines{}
	l, err := NewLog(js, NewTable([]string{"d"}), map[string]float64{"d": 5}, 1, time.Second, "test", slog.New(logs))
	testenv.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 10*time.Second, "the log read", l.Fresh)

	ns.Stop()
	testenv.WaitFor(t, 10*time.Second, "the outage line", func() bool { return len(logs.starting("rollout log unavailable")) == 1 })
	time.Sleep(5 * time.Second)
	if got := logs.starting("rollout log unavailable"); len(got) != 1 || !strings.Contains(got[0], ns.Addr()) || !strings.Contains(got[0], "since=") {
		t.Errorf("outage lines %q; want one naming %s and since when", got, ns.Addr())
	}
	if n := len(logs.starting("rollout log still unavailable")); n < 1 || n > 3 {
		t.Errorf("%d reminders in about 5 s at one per 2 s; want 1 to 3:\n%s", n, strings.Join(logs.all, "\n"))
	}
	ns.Start()
	testenv.WaitFor(t, 20*time.Second, "the recovery line", func() bool { return len(logs.starting("rollout log available again")) == 1 })
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if len(logs.all) > 8 {
		t.Errorf("%d log lines for an outage of about 6 s; want a handful:\n%s", len(logs.all), strings.Join(logs.all, "\n"))
	}
}

// A read refused because the client is reconnecting says so in words,
// not only as the client's "outbound buffer limit exceeded".
func TestOutageSaysNotConnected(t *testing.T) {
	nc, js := testenv.NATSServer(t)
	l, err := NewLog(js, NewTable(nil), nil, 1, time.Minute, "test", slog.New(slog.DiscardHandler))
	testenv.Must(t, err)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("ensure stream X: %w", nats.ErrReconnectBufExceeded), "not connected to NATS (ensure stream X: nats: outbound buffer limit exceeded)"},
		{errors.New("stream not found"), "stream not found"},
	} {
		args := l.outage(time.Now(), tc.err)
		got := fmt.Sprint(args[len(args)-1])
		if got != tc.want {
			t.Errorf("outage(%v) err = %q; want %q", tc.err, got, tc.want)
		}
		if url := fmt.Sprint(args[1]); !strings.Contains(url, nc.ConnectedAddr()) {
			t.Errorf("outage url = %q; want the server %s", url, nc.ConnectedAddr())
		}
	}
}
