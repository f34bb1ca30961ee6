package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go"
)

// DefaultWatchedAgainAfter is how long heartbeats must have been back
// before an unwatched hold ends (SPEC §11 rev. 4: 30 s).
const DefaultWatchedAgainAfter = 30 * time.Second

// Watchdog follows the analyzer's heartbeats (graygate.heartbeat, SPEC
// §11 rev. 4) and holds the table's grays when nobody watches them: with
// no valid heartbeat for After, every deployment at or below HoldAbove
// percent serves primary only, and those above keep their share, until
// heartbeats have been back for WatchedAgainAfter. A heartbeat counts
// when Signers allows its signer to author analyzer events (any
// heartbeat when Signers is empty, as rollout events then are), its
// time is within After of this gateway's clock, and it is newer than
// every heartbeat of its holder before it: a copy of a signed heartbeat
// (a gateway identity can make the server deliver one it stored, through
// a reply subject) never counts twice, so it cannot stretch a silence.
type Watchdog struct {
	Table     *Table
	Signers   events.Signers
	After     time.Duration // 0: never hold
	HoldAbove float64
	// WatchedAgainAfter defaults to DefaultWatchedAgainAfter.
	WatchedAgainAfter time.Duration
	// MaxGap is the longest pause between heartbeats that still counts as
	// heartbeats being back (twice the analyzer's interval, which is how
	// often it sends one); longer, and WatchedAgainAfter starts over. 0:
	// WatchedAgainAfter (a single heartbeat then lifts the hold).
	MaxGap time.Duration
	Log    *slog.Logger
	// Gauge, when set, is told 1 while the hold is on and 0 otherwise
	// (graygate_gray_unwatched).
	Gauge func(on bool)

	mu        sync.Mutex
	lastBeat  time.Time // monotonic: the last valid heartbeat (or the start)
	backSince time.Time // first valid heartbeat since the hold began; zero: none
	ignored   uint64
	// newest is the time of each holder's newest counted heartbeat, at
	// most maxHolders of them (the newest kept).
	newest map[string]time.Time
}

// maxHolders bounds the holders whose newest heartbeat a Watchdog keeps:
// one analyzer holds the lease at a time, and a few have taken over
// within the After that a heartbeat's time may lag.
const maxHolders = 16

// Run subscribes to heartbeats and checks for their absence until ctx
// ends. It returns an error only when it cannot subscribe.
func (w *Watchdog) Run(ctx context.Context, nc *nats.Conn) error {
	if w.After <= 0 {
		return nil
	}
	if w.WatchedAgainAfter <= 0 {
		w.WatchedAgainAfter = DefaultWatchedAgainAfter
	}
	if w.MaxGap <= 0 {
		w.MaxGap = w.WatchedAgainAfter
	}
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	w.mu.Lock()
	w.lastBeat = time.Now() // a gateway that just started has not missed any
	w.mu.Unlock()
	sub, err := nc.Subscribe(events.SubjectHeartbeat, func(m *nats.Msg) { w.beat(m.Header, m.Data, time.Now()) })
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", events.SubjectHeartbeat, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	every := min(w.After/4, time.Second)
	if every <= 0 {
		every = time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			w.check(now)
		}
	}
}

// beat takes one heartbeat received at now.
func (w *Watchdog) beat(h nats.Header, data []byte, now time.Time) {
	hb, why := w.refuse(h, data, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if why == "" {
		why = w.replayed(hb)
	}
	if why != "" {
		w.ignored++
		if n := w.ignored; n == 1 || n%100 == 0 {
			w.Log.Warn("ignoring a heartbeat", "why", why, "ignored", n)
		}
		return
	}
	if w.Table.Unwatched() && (w.backSince.IsZero() || now.Sub(w.lastBeat) > w.MaxGap) {
		w.backSince = now // heartbeats are back (again)
	}
	w.lastBeat = now
}

// refuse decodes a heartbeat and says why it does not count, or "".
func (w *Watchdog) refuse(h nats.Header, data []byte, now time.Time) (hb events.Heartbeat, why string) {
	if w.Signers.Required() {
		signer, err := events.VerifySignature(h, data)
		if err != nil {
			return hb, err.Error()
		}
		if !w.Signers.May(events.ActorAnalyzer, signer) {
			return hb, "signer " + signer + " is not listed in nats.rollout_signers.analyzer"
		}
	}
	if err := json.Unmarshal(data, &hb); err != nil || hb.Holder == "" {
		return hb, "not a heartbeat"
	}
	if d := now.Sub(hb.Time); d > w.After || d < -w.After {
		return hb, "its time is more than gray_unwatched_after from this gateway's clock"
	}
	return hb, ""
}

// replayed says why hb is not newer than its holder's newest counted
// heartbeat, or "" after recording it as the newest. w.mu is held.
func (w *Watchdog) replayed(hb events.Heartbeat) string {
	if last, ok := w.newest[hb.Holder]; ok && !hb.Time.After(last) {
		return "not newer than the last heartbeat of " + hb.Holder + " (a copy)"
	}
	if w.newest == nil {
		w.newest = make(map[string]time.Time)
	}
	if _, ok := w.newest[hb.Holder]; !ok && len(w.newest) >= maxHolders {
		var oldest string // holders are never ""
		for holder, t := range w.newest {
			if oldest == "" || t.Before(w.newest[oldest]) {
				oldest = holder
			}
		}
		delete(w.newest, oldest)
	}
	w.newest[hb.Holder] = hb.Time
	return ""
}

// check turns the hold on after After without a heartbeat, and off once
// heartbeats have been back for WatchedAgainAfter: coming, none more than
// MaxGap after the one before, the last one too (SPEC §11 rev. 4: one
// heartbeat from an analyzer that then died lifted it).
func (w *Watchdog) check(now time.Time) {
	w.mu.Lock()
	silent := now.Sub(w.lastBeat)
	back := !w.backSince.IsZero() && now.Sub(w.backSince) >= w.WatchedAgainAfter && silent <= w.MaxGap
	w.mu.Unlock()
	on := w.Table.Unwatched()
	switch {
	case !on && silent > w.After:
		w.Table.SetUnwatched(true, w.HoldAbove)
		w.Log.Error("no analyzer heartbeat: grays at or below unwatched_hold_above serve primary only, the others keep their share",
			"silent_for", silent.Round(time.Millisecond).String(), "gray_unwatched_after", w.After.String(), "unwatched_hold_above", w.HoldAbove)
		w.gauge(true)
	case on && back:
		w.mu.Lock()
		w.backSince = time.Time{}
		w.mu.Unlock()
		w.Table.SetUnwatched(false, w.HoldAbove)
		w.Log.Info("analyzer heartbeats are back: grays serve their shares again", "back_for", w.WatchedAgainAfter.String())
		w.gauge(false)
	case on && silent > w.After:
		w.mu.Lock()
		w.backSince = time.Time{} // they stopped again
		w.mu.Unlock()
	}
}

func (w *Watchdog) gauge(on bool) {
	if w.Gauge != nil {
		w.Gauge(on)
	}
}
