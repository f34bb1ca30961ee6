// Package rolloutlog reads the rollout log (the GRAYGATE_ROLLOUT stream,
// SPEC §7) the way every reader of it does — the gateway and the analyzer
// alike: in stream order by direct get, woken by a core subscription that
// rings when a change is published, with a read every second besides, and
// a message that is not a valid rollout event of its subject's deployment
// named, not folded (SPEC §11 rev. 3). What a reader does with the
// messages (its table, its readiness) stays its own.
//
// It uses no JetStream consumer: an ordered consumer's random name cannot
// be granted exactly (SPEC §11 rev. 3), and a direct get needs no grant
// beyond the stream's. Reading resumes from the last sequence read, not
// from what was rung, so whatever a reconnect made the bell miss is read
// all the same.
package rolloutlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PollEvery is how often the log is read without a bell: it bounds how
// late a change missed by the subscription (during a reconnect) arrives.
const PollEvery = time.Second

// readTimeout bounds one read of the log.
const readTimeout = 5 * time.Second

// A get is sent again every hedgeEvery until one answers, each copy
// waiting at most getTimeout, at most maxHedges at once: while a stream
// has no leader (a leader change, SPEC §11 rev. 4) a request is never
// answered, and a follower that waited for it would apply a change stored
// meanwhile only after its timeout. A copy sent once the new leader is up
// is answered at once, so a change stored during a leader change is read
// within hedgeEvery of being stored.
const (
	hedgeEvery = 10 * time.Millisecond
	getTimeout = 250 * time.Millisecond
	maxHedges  = 32
)

// bellRetries are the pauses before reading again when a bell found
// nothing new: the subscription can deliver a message before the stream
// has stored it. 1, 3 and 10 ms catch the usual case at once; then a read
// every 20 ms for about a second covers a message stored much later than
// it was published — during a leader change (SPEC §11 rev. 4) — within
// 20 ms of its storage, until the next poll would read it anyway. A bell
// that never leads to a message (an append refused for its revision)
// costs about 50 reads.
var bellRetries = func() []time.Duration {
	out := []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond}
	for sum := 14 * time.Millisecond; sum < PollEvery; sum += 20 * time.Millisecond {
		out = append(out, 20*time.Millisecond)
	}
	return out
}()

// Bell subscribes nc to every rollout subject. The channel holds a signal
// when a change was published since it was last received; stop ends the
// subscription.
func Bell(nc *nats.Conn) (bell <-chan struct{}, stop func(), err error) {
	ch := make(chan struct{}, 1)
	sub, err := nc.Subscribe(events.SubjectRolloutAll, func(*nats.Msg) {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe to %s: %w", events.SubjectRolloutAll, err)
	}
	return ch, func() { _ = sub.Unsubscribe() }, nil
}

// Reader reads a rollout stream in order from Next, the stream sequence
// read next.
type Reader struct {
	Stream jetstream.Stream
	Next   uint64
}

// Read passes every message stored from r.Next on to fold, in stream
// order, moving Next past each, and returns how many it read. It blocks
// for one direct get per message plus one; each get is hedged (get).
func (r *Reader) Read(ctx context.Context, fold func(*jetstream.RawStreamMsg)) (int, error) {
	n := 0
	for {
		msg, err := r.get(ctx, r.Next)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read %s from %d: %w", events.StreamRollout, r.Next, err)
		}
		fold(msg)
		r.Next = msg.Sequence + 1
		n++
	}
}

// get reads the message at seq: it sends the request, and again every
// hedgeEvery while none has been answered, each copy bounded by
// getTimeout, until one is answered with the message or with "not
// found", or ctx ends (then it returns the last failure, or ctx's
// error). Every copy still in flight is cancelled before it returns.
func (r *Reader) get(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		msg *jetstream.RawStreamMsg
		err error
	}
	answers := make(chan answer, maxHedges)
	inFlight := 0
	send := func() {
		inFlight++
		go func() {
			gctx, cancel := context.WithTimeout(ctx, getTimeout)
			defer cancel()
			msg, err := r.Stream.GetMsg(gctx, seq, jetstream.WithGetMsgSubject(events.SubjectRolloutAll))
			answers <- answer{msg, err}
		}()
	}
	send()
	hedge := time.NewTicker(hedgeEvery)
	defer hedge.Stop()
	var last error
	for {
		select {
		case a := <-answers:
			inFlight--
			if a.err == nil || errors.Is(a.err, jetstream.ErrMsgNotFound) {
				return a.msg, a.err
			}
			last = a.err
		case <-hedge.C:
			if inFlight < maxHedges {
				send()
			}
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return nil, last
		}
	}
}

// Follow reads at once and then whenever bell rings or PollEvery has
// passed, each read bounded by 5 s (and each get in it hedged, so no read
// waits behind a request a leaderless stream never answers); a bell whose
// read found nothing new is read again after the pauses of bellRetries,
// or at once when the bell rings again meanwhile. After every read, more is told how many messages it read or why it
// failed, and says whether to go on. Follow returns when ctx ends or more
// says no.
func Follow(ctx context.Context, bell <-chan struct{}, read func(context.Context) (int, error), more func(n int, err error) bool) {
	tick := time.NewTicker(PollEvery)
	defer tick.Stop()
	once := func() (int, error) {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		defer cancel()
		return read(rctx)
	}
	rung := false
	for {
		n, err := once()
		for i := 0; rung && err == nil && n == 0 && i < len(bellRetries); i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(bellRetries[i]):
			case <-bell: // rung again: read now, not after the pause
			}
			n, err = once()
		}
		if ctx.Err() != nil || !more(n, err) {
			return
		}
		rung = false
		select {
		case <-ctx.Done():
			return
		case <-bell:
			rung = true
		case <-tick.C:
		}
	}
}

// Reasons a message on a rollout subject is not folded: the label of
// graygate_rollout_invalid_events_total{reason} (SPEC §7 rev. 4, §11).
const (
	// ReasonUndecodable: not a valid rollout event (does not decode,
	// breaks its rules, or is another type).
	ReasonUndecodable = "undecodable"
	// ReasonDeployment: names another deployment than its subject's.
	ReasonDeployment = "deployment"
	// ReasonSignature: unsigned, or its signature does not verify.
	ReasonSignature = "signature"
	// ReasonSigner: its signer may not author its actor.
	ReasonSigner = "signer"
	// ReasonReplay: its prev_revision is not the sequence of the message
	// before it on its subject (an old event published again).
	ReasonReplay = "replay"
)

// Reasons lists every reason, in the order above.
var Reasons = []string{ReasonUndecodable, ReasonDeployment, ReasonSignature, ReasonSigner, ReasonReplay}

// PrevUnknown is the previous sequence a reader passes to Verifier.Check
// for the first message it reads on a subject when it does not know what
// came before (the log keeps the last 100 per subject): the event's
// prev_revision must then only lie before it.
const PrevUnknown = ^uint64(0)

// Verdict is what a reader makes of one message on a rollout subject:
// an event to fold (Event, with its time At), or a Reason and Note for
// skipping it.
type Verdict struct {
	Event  *events.RolloutChanged
	At     time.Time
	Signer string
	Reason string
	Note   string
}

// Valid reports whether the message is an event to fold.
func (v Verdict) Valid() bool { return v.Reason == "" }

// Verifier judges messages on rollout subjects the way every reader
// does. With no Signers, events are accepted unsigned, as in rev. 3 (each
// service warns at start); with Signers, an event must be signed by a key
// its actor lists and carry the deployment of its subject and, as
// prev_revision, the sequence of the message before it on the subject.
type Verifier struct {
	Signers events.Signers
}

// expectedLastSubjSeqSubjHeader makes the server check the expected last
// subject sequence against another subject's last message (nats-server
// 2.11 and later).
const expectedLastSubjSeqSubjHeader = "Nats-Expected-Last-Subject-Sequence-Subject"

// Check judges a message stored at seq on deployment's rollout subject,
// with headers h and body data; prev is the sequence of the message
// before it on that subject (0 when none, PrevUnknown when the reader
// cannot know).
func (v Verifier) Check(deployment string, prev, seq uint64, h nats.Header, data []byte) Verdict {
	ev, at, reason, note := decode(deployment, data)
	if note != "" {
		return Verdict{Reason: reason, Note: note}
	}
	if !v.Signers.Required() {
		return Verdict{Event: ev, At: at}
	}
	signer, err := events.VerifySignature(h, data)
	if err != nil {
		return Verdict{Reason: ReasonSignature, Note: "a rollout event refused: " + err.Error()}
	}
	if !v.Signers.May(ev.Actor, signer) {
		return Verdict{Signer: signer, Reason: ReasonSigner,
			Note: "a rollout event of actor " + string(ev.Actor) + " signed by " + clip(signer, 60) + ", which nats.rollout_signers does not list for it"}
	}
	switch p := ev.PrevRevision; {
	case p == nil:
		return Verdict{Signer: signer, Reason: ReasonReplay, Note: "a signed rollout event without prev_revision"}
	case len(h.Values(jetstream.ExpectedLastSubjSeqHeader)) > 1 || len(h.Values(expectedLastSubjSeqSubjHeader)) > 0:
		// The server compares the expected sequence with the last message
		// of the subject the second header names (any subject), not this
		// one's: with it, an old event whose prev_revision is 0 could be
		// stored again. An append never sets it, nor the first twice.
		return Verdict{Signer: signer, Reason: ReasonReplay,
			Note: "a rollout event stored with " + expectedLastSubjSeqSubjHeader + " or more than one " +
				jetstream.ExpectedLastSubjSeqHeader + ", which no append sets: replayed"}
	case h.Get(jetstream.ExpectedLastSubjSeqHeader) != strconv.FormatUint(*p, 10):
		// Every append sets this header to the event's prev_revision, and
		// the server stores the message only while the subject's last one
		// is that revision; the header is kept with it. A copy published
		// again (after the messages before it on the subject were pushed
		// out, so that a reader starting now cannot know what preceded it)
		// cannot carry a header the server would accept.
		return Verdict{Signer: signer, Reason: ReasonReplay,
			Note: fmt.Sprintf("a rollout event appended after revision %d not stored as its append asked (%s %q): replayed", *p,
				jetstream.ExpectedLastSubjSeqHeader, clip(h.Get(jetstream.ExpectedLastSubjSeqHeader), 30))}
	case prev == PrevUnknown && *p >= seq:
		return Verdict{Signer: signer, Reason: ReasonReplay,
			Note: fmt.Sprintf("a rollout event appended after revision %d stored at %d (replayed)", *p, seq)}
	case prev != PrevUnknown && *p != prev:
		return Verdict{Signer: signer, Reason: ReasonReplay,
			Note: fmt.Sprintf("a rollout event appended after revision %d stored after revision %d (replayed)", *p, prev)}
	}
	return Verdict{Event: ev, At: at, Signer: signer}
}

// Decode returns the rollout event a message on deployment's rollout
// subject holds and its event time, or a note saying why it holds none:
// it does not decode, breaks its rules, is another type, or names another
// deployment. It checks no signature: readers use Verifier.Check.
func Decode(deployment string, data []byte) (*events.RolloutChanged, time.Time, string) {
	ev, at, _, note := decode(deployment, data)
	return ev, at, note
}

// decode is Decode with the reason of a note.
func decode(deployment string, data []byte) (*events.RolloutChanged, time.Time, string, string) {
	env, v, err := events.DecodeEvent(data)
	if err != nil {
		return nil, time.Time{}, ReasonUndecodable, "not a valid rollout event: " + clip(err.Error(), 200)
	}
	ev, ok := v.(*events.RolloutChanged)
	switch {
	case !ok:
		return nil, time.Time{}, ReasonUndecodable, "not a rollout event: type " + clip(env.Type, 100)
	case ev.Deployment != deployment:
		return nil, time.Time{}, ReasonDeployment, "a rollout event of deployment " + clip(ev.Deployment, 100) + " on this deployment's subject"
	}
	return ev, env.Time, "", ""
}

// Deployment returns the deployment of a rollout subject.
func Deployment(subject string) string {
	return strings.TrimPrefix(subject, events.SubjectRolloutPrefix)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Counters are one service's graygate_rollout_invalid_events_total
// series, one per reason, created in its set.
type Counters map[string]*metrics.Counter

// NewCounters creates a series for every reason in set.
func NewCounters(set *metrics.Set) Counters {
	c := Counters{}
	for _, r := range Reasons {
		c[r] = set.GetOrCreateCounter(`graygate_rollout_invalid_events_total{reason="` + r + `"}`)
	}
	return c
}

// Inc counts one message skipped for reason; a nil Counters counts nothing.
func (c Counters) Inc(reason string) {
	if m := c[reason]; m != nil {
		m.Inc()
	}
}
