// Package lease elects the one analyzer that acts: the holder of a key in a
// JetStream key-value bucket (SPEC §9, §11 rev. 4). It is timed only by
// each process's own monotonic clock, never by timestamps or the servers'
// clocks, so clock skew between hosts does not matter:
//
//   - the holder renews its entry by compare-and-set (Update expecting its
//     last revision) every TTL/3;
//   - it acts only while its last successful renewal began less than TTL/2
//     ago (MayAct), and reads the entry back right before each rollout
//     append (Confirm); a process that was stopped, paused or partitioned
//     and comes back therefore does nothing until it has renewed;
//   - another analyzer takes the lease over only after it has seen the
//     entry's revision unchanged for a whole TTL (Update expecting that
//     revision), or creates it when there is no entry.
//
// A taker sees a revision no earlier than the holder began the renewal
// that wrote it, and waits a whole TTL after that; the holder stopped
// acting TTL/2 after that renewal began. So a holder and a taker never act
// at once while network delays stay below TTL/2.
//
// It relies only on what nats-server 2.9 offers: Create (publish expecting
// no message on the key's subject, or a delete marker), Update (expecting
// a revision) and Get.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of Config.
const (
	DefaultBucket = "graygate_analyzer"
	DefaultKey    = "leader"
	// MaxBytes bounds the bucket a missing one is created with (SPEC §11
	// rev. 4: no stream without a byte limit); it holds one small entry.
	MaxBytes   = 1 << 20
	DefaultTTL = 10 * time.Second
)

// Errors of Confirm.
var (
	// ErrNotHolder: this process does not hold the lease, or its last
	// renewal is TTL/2 old or older.
	ErrNotHolder = errors.New("this analyzer does not hold the lease now")
	// ErrLeaseMoved: the entry read back is not the one this process
	// last wrote (another analyzer took it over).
	ErrLeaseMoved = errors.New("the lease entry moved on: another analyzer holds it")
)

// Config says where the lease lives and how it is timed.
type Config struct {
	// Bucket is the key-value bucket (created when missing, without a
	// TTL: no entry ever expires by a server's clock); default
	// graygate_analyzer.
	Bucket string
	// Key is the lease's key; default leader.
	Key string
	// TTL is analyzer.lease_ttl (default 10s): renewals every TTL/3,
	// acting within TTL/2 of the last renewal, takeover after the
	// revision stood still for TTL, vacancy reported after 2 × TTL.
	TTL time.Duration
	// Holder identifies this process in the entry and in the events it
	// publishes under the lease; unique per process.
	Holder string
	// Replicas of the bucket's stream when it has to be created.
	Replicas int
	// Clock returns the current time; default time.Now, whose monotonic
	// reading every duration here is measured on.
	Clock func() time.Time
	// BeforeStep, when set, is called at the start of every renewal or
	// takeover attempt; a test blocks in it to stop the process's lease
	// work the way SIGSTOP would.
	BeforeStep func(ctx context.Context)
	// Logger; default discards.
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Key == "" {
		c.Key = DefaultKey
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.Replicas < 1 {
		c.Replicas = 1
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Lease is one process's view of the lease. MayAct, Held, Current, Confirm
// and Vacancy are safe for concurrent use; Run (or Step, in tests) drives
// acquisition and renewal.
type Lease struct {
	cfg Config
	kv  jetstream.KeyValue

	mu sync.Mutex
	// rev is the revision of our entry after our last successful write;
	// 0 when not holding.
	rev uint64
	// renewedAt is when the last successful write (a renewal, a take-over
	// or a creation) began.
	renewedAt time.Time
	// seenRev is the entry's revision as last read while not holding,
	// and seenAt when this process first read it (0 and zero: no entry,
	// or none read yet).
	seenRev uint64
	seenAt  time.Time
	// aliveAt is the last sign that some analyzer held the lease: our
	// own renewal, or a revision we saw change. It starts at Open.
	aliveAt time.Time
	// warnedAt is when the vacancy was last logged, failedAt when a failed
	// read or write was (each at most once per TTL).
	warnedAt, failedAt time.Time
	onChange           func(held bool)
}

// Open binds to the bucket, creating it when missing. Without a deadline
// on ctx, it waits at most 5 seconds.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Lease, error) {
	cfg.defaults()
	if cfg.Holder == "" {
		return nil, errors.New("lease: Holder is empty")
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      cfg.Bucket,
			Description: "graygate analyzer lease (SPEC §11 rev. 4)",
			History:     1,
			MaxBytes:    MaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another analyzer won the race
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open lease bucket %s: %w", cfg.Bucket, err)
	}
	if st, err := kv.Status(ctx); err == nil && st.TTL() > 0 && st.TTL() < 2*cfg.TTL {
		// A bucket made before rev. 4 expires entries by the server's
		// clock; renewals every TTL/3 keep a live holder's entry, but a
		// TTL this short may drop it between two of them.
		cfg.Logger.Warn("lease bucket expires entries sooner than twice lease_ttl; recreate it without a TTL",
			"bucket", cfg.Bucket, "bucket_ttl", st.TTL(), "lease_ttl", cfg.TTL)
	}
	return &Lease{cfg: cfg, kv: kv, aliveAt: cfg.Clock()}, nil
}

// OnChange registers f to be called (from Run's goroutine) whenever
// MayAct turns true or false at a step. Call it before Run.
func (l *Lease) OnChange(f func(held bool)) { l.onChange = f }

// TTL returns lease_ttl.
func (l *Lease) TTL() time.Duration { return l.cfg.TTL }

// Holder returns this process's name in the entry.
func (l *Lease) Holder() string { return l.cfg.Holder }

// MayAct reports whether this process holds the lease and may act now —
// its last successful renewal began less than TTL/2 ago — and the lease
// it acts under. It does no I/O.
func (l *Lease) MayAct() (events.LeaseRef, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current(), l.mayAct(l.cfg.Clock())
}

// Held is MayAct without the lease (engine.Leader).
func (l *Lease) Held() bool {
	_, ok := l.MayAct()
	return ok
}

// Current returns the lease as this process last wrote it: its holder and
// the revision of its last renewal (revision 0 when it holds none).
func (l *Lease) Current() events.LeaseRef {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current()
}

func (l *Lease) current() events.LeaseRef {
	return events.LeaseRef{Holder: l.cfg.Holder, Revision: l.rev}
}

func (l *Lease) mayAct(now time.Time) bool {
	return l.rev != 0 && now.Sub(l.renewedAt) < l.cfg.TTL/2
}

// Confirm reads the lease entry back from the server and returns the lease
// to act under when the entry is still this process's last write and
// MayAct still holds after the read; ErrNotHolder, ErrLeaseMoved or the
// read's error otherwise. Call it right before each rollout append.
func (l *Lease) Confirm(ctx context.Context) (events.LeaseRef, error) {
	if _, ok := l.MayAct(); !ok {
		return events.LeaseRef{}, ErrNotHolder
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/2)
	defer cancel()
	e, err := l.kv.Get(ctx, l.cfg.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.LeaseRef{}, ErrLeaseMoved
	}
	if err != nil {
		return events.LeaseRef{}, fmt.Errorf("read the lease back: %w", err)
	}
	ref, ok := l.MayAct()
	switch {
	case !ok:
		return events.LeaseRef{}, ErrNotHolder
	case e.Revision() != ref.Revision || string(e.Value()) != l.cfg.Holder:
		return events.LeaseRef{}, fmt.Errorf("%w (entry at revision %d, ours %d)", ErrLeaseMoved, e.Revision(), ref.Revision)
	}
	return ref, nil
}

// Vacancy returns how long the lease has been vacant as this process sees
// it: the time since some analyzer's entry lapsed — TTL after the last
// sign of a holder (our own renewal, or a revision we saw change) — or 0
// while one holds it.
func (l *Lease) Vacancy() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.vacancy(l.cfg.Clock())
}

func (l *Lease) vacancy(now time.Time) time.Duration {
	if l.mayAct(now) {
		return 0
	}
	return max(now.Sub(l.aliveAt)-l.cfg.TTL, 0)
}

// VacancyReported reports whether the vacancy is long enough to be
// reported: over 2 × TTL (SPEC §11 rev. 4).
func (l *Lease) VacancyReported() bool { return l.Vacancy() > 2*l.cfg.TTL }

// Run renews the lease while holding it and watches it otherwise, every
// TTL/3, until ctx ends; a vacancy longer than 2 × TTL is logged as an
// error once per TTL. When ctx ends it releases the lease (deleting its
// entry, expecting its revision) so that another analyzer takes over at
// once. It returns nil.
func (l *Lease) Run(ctx context.Context) error {
	tick := time.NewTicker(l.cfg.TTL / 3)
	defer tick.Stop()
	for {
		l.Step(ctx)
		l.reportVacancy()
		select {
		case <-ctx.Done():
			l.release()
			return nil
		case <-tick.C:
		}
	}
}

// reportVacancy logs an error once per TTL while the vacancy is longer
// than 2 × TTL.
func (l *Lease) reportVacancy() {
	l.mu.Lock()
	now := l.cfg.Clock()
	v := l.vacancy(now)
	log := v > 2*l.cfg.TTL && (l.warnedAt.IsZero() || now.Sub(l.warnedAt) >= l.cfg.TTL)
	if log {
		l.warnedAt = now
	}
	l.mu.Unlock()
	if log {
		l.cfg.Logger.Error("no analyzer holds the lease: failing grays are not rolled back",
			"vacant_seconds", v.Seconds(), "lease_ttl", l.cfg.TTL, "bucket", l.cfg.Bucket, "holder", l.cfg.Holder)
	}
}

// Step makes one attempt: renew when holding; else read the entry, and
// take it over when its revision stood still for a whole TTL since this
// process first read it, or create it when there is none. Run calls it;
// tests may too.
func (l *Lease) Step(ctx context.Context) {
	if l.cfg.BeforeStep != nil {
		l.cfg.BeforeStep(ctx)
	}
	l.mu.Lock()
	before := l.mayAct(l.cfg.Clock())
	rev := l.rev
	l.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/3)
	defer cancel()
	if rev != 0 {
		l.renew(cctx, rev)
	} else {
		l.watch(cctx)
	}

	l.mu.Lock()
	after := l.mayAct(l.cfg.Clock())
	l.mu.Unlock()
	if after != before {
		l.cfg.Logger.Info("analyzer lease", "acting", after, "holder", l.cfg.Holder, "revision", l.Current().Revision)
		if l.onChange != nil {
			l.onChange(after)
		}
	}
}

// renew writes our entry again, expecting rev.
func (l *Lease) renew(ctx context.Context, rev uint64) {
	start := l.cfg.Clock()
	newRev, err := l.kv.Update(ctx, l.cfg.Key, []byte(l.cfg.Holder), rev)
	moved := errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
	var own uint64
	if moved {
		// A renewal stored by the server whose answer was lost leaves our
		// own entry at a newer revision: adopt it, without counting it as
		// a renewal (it began after the last one we know succeeded, so
		// acting on the latter stays on the safe side).
		if e, gerr := l.kv.Get(ctx, l.cfg.Key); gerr == nil && string(e.Value()) == l.cfg.Holder {
			own = e.Revision()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.won(newRev, start)
	case moved && own != 0:
		l.rev = own
		l.cfg.Logger.Info("analyzer lease: our entry is at a newer revision (a renewal's answer was lost); adopted it",
			"holder", l.cfg.Holder, "revision", own)
	case moved:
		// Another analyzer took it over (or deleted it): watch it from
		// now, as a newcomer would; the entry moved, a sign of a holder.
		l.rev, l.seenRev, l.seenAt = 0, 0, time.Time{}
		l.aliveAt = l.cfg.Clock()
		l.cfg.Logger.Warn("analyzer lease lost: another analyzer took it over", "holder", l.cfg.Holder, "revision", rev)
	default:
		// Unreachable NATS or a timeout: keep the revision and try again;
		// MayAct turns false by itself TTL/2 after the last renewal.
		l.failed("analyzer lease renewal failed", "error", err,
			"since_renewal", l.cfg.Clock().Sub(l.renewedAt).Round(time.Millisecond))
	}
}

// watch reads the entry and takes the lease when it may.
func (l *Lease) watch(ctx context.Context) {
	e, err := l.kv.Get(ctx, l.cfg.Key)
	now := l.cfg.Clock()
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// No entry (never written, or released): take it.
		newRev, err := l.kv.Create(ctx, l.cfg.Key, []byte(l.cfg.Holder))
		l.mu.Lock()
		defer l.mu.Unlock()
		if err == nil {
			l.won(newRev, now)
			return
		}
		l.seenRev, l.seenAt = 0, time.Time{}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			l.failed("analyzer lease: create failed", "error", err)
		}
		return
	case err != nil:
		l.mu.Lock()
		l.failed("analyzer lease: read failed", "error", err)
		l.mu.Unlock()
		return
	}
	l.mu.Lock()
	if e.Revision() != l.seenRev {
		// A holder wrote it since we last looked (or we look the first
		// time): it is alive; count a whole TTL from now.
		if l.seenRev != 0 {
			l.aliveAt = now
		}
		l.seenRev, l.seenAt = e.Revision(), now
		l.mu.Unlock()
		return
	}
	stale := now.Sub(l.seenAt) >= l.cfg.TTL
	seen := l.seenRev
	l.mu.Unlock()
	if !stale {
		return
	}
	newRev, err := l.kv.Update(ctx, l.cfg.Key, []byte(l.cfg.Holder), seen)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.cfg.Logger.Warn("analyzer lease taken over: its revision stood still for lease_ttl",
			"holder", l.cfg.Holder, "previous", string(e.Value()), "revision", seen, "lease_ttl", l.cfg.TTL)
		l.won(newRev, now)
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		// It moved (another analyzer was quicker): a holder; look again.
		l.seenRev, l.seenAt, l.aliveAt = 0, time.Time{}, l.cfg.Clock()
	default:
		l.failed("analyzer lease: take-over failed", "error", err)
	}
}

// failed logs a failed read or write of the entry, at most once per TTL
// (NATS away fails every step). l.mu is held.
func (l *Lease) failed(msg string, args ...any) {
	now := l.cfg.Clock()
	if !l.failedAt.IsZero() && now.Sub(l.failedAt) < l.cfg.TTL {
		return
	}
	l.failedAt = now
	l.cfg.Logger.Warn(msg, append(args, "bucket", l.cfg.Bucket, "holder", l.cfg.Holder)...)
}

// won records a successful write of our entry at rev, begun at start.
// l.mu is held.
func (l *Lease) won(rev uint64, start time.Time) {
	l.rev, l.renewedAt, l.aliveAt = rev, start, start
	l.seenRev, l.seenAt = 0, time.Time{}
}

// release deletes our entry when we hold it, expecting our revision so a
// newer holder's entry is never removed.
func (l *Lease) release() {
	l.mu.Lock()
	rev := l.rev
	l.rev = 0
	l.mu.Unlock()
	if rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.kv.Delete(ctx, l.cfg.Key, jetstream.LastRevision(rev)); err != nil {
		l.cfg.Logger.Warn("lease release failed; another analyzer takes it over after lease_ttl", "error", err)
	}
	if l.onChange != nil {
		l.onChange(false)
	}
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 5*time.Second)
}
