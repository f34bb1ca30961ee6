// Package lease elects the one analyzer that acts: the holder of a key in a
// JetStream key-value bucket whose entries expire after a TTL (SPEC §9).
// It relies only on what nats-server 2.9 offers: a bucket-wide TTL (the
// stream's max age), Create (publish expecting no message on the key's
// subject, or a delete marker) and Update (expecting the holder's last
// revision).
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

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

// Config says where the lease lives and how long it lasts.
type Config struct {
	// Bucket is the key-value bucket (created with TTL when missing);
	// default graygate_analyzer.
	Bucket string
	// Key is the lease's key; default leader.
	Key string
	// TTL is how long an entry lives after its last write: a holder that
	// stops renewing loses the lease within TTL, and another analyzer
	// takes it. Default 10s. Renewals happen every TTL/3.
	TTL time.Duration
	// Holder identifies this process in the entry (for operators).
	Holder string
	// Replicas of the bucket's stream when it has to be created.
	Replicas int
	// Clock returns the current time; default time.Now.
	Clock func() time.Time
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

// Lease is one process's view of the lease: whether it holds it and until
// when it may act on that. Held is safe for concurrent use; Run drives
// acquisition and renewal.
type Lease struct {
	cfg Config
	kv  jetstream.KeyValue

	mu         sync.Mutex
	rev        uint64    // revision of our entry; 0 when not holding
	validUntil time.Time // act only before this
	onChange   func(held bool)
}

// Open binds to the bucket, creating it when missing. An existing bucket
// is used as it is; a TTL different from cfg.TTL is logged. Without a
// deadline on ctx, it waits at most 5 seconds.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Lease, error) {
	cfg.defaults()
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      cfg.Bucket,
			Description: "graygate analyzer leader lease (SPEC §9)",
			History:     1,
			MaxBytes:    MaxBytes,
			TTL:         cfg.TTL,
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
	if st, err := kv.Status(ctx); err == nil && st.TTL() != cfg.TTL {
		cfg.Logger.Warn("lease bucket has another TTL than configured; the bucket's applies",
			"bucket", cfg.Bucket, "ttl", st.TTL(), "configured", cfg.TTL)
		if st.TTL() > 0 {
			cfg.TTL = st.TTL()
		}
	}
	return &Lease{cfg: cfg, kv: kv}, nil
}

// OnChange registers f to be called (from Run's goroutine) whenever the
// lease is won or lost. Call it before Run.
func (l *Lease) OnChange(f func(held bool)) { l.onChange = f }

// Held reports whether this process holds the lease and may act now. It
// turns false 3/4 of a TTL after the last successful write, before the
// entry can expire on the server, so two holders never overlap even when
// a renewal hangs.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev != 0 && l.cfg.Clock().Before(l.validUntil)
}

// TTL returns the lease's TTL.
func (l *Lease) TTL() time.Duration { return l.cfg.TTL }

// Run tries to take the lease, then renews it, every TTL/3 until ctx
// ends; then it releases the lease (deleting its entry) so that another
// analyzer takes over at once. It returns nil when ctx ends.
func (l *Lease) Run(ctx context.Context) error {
	tick := time.NewTicker(l.cfg.TTL / 3)
	defer tick.Stop()
	for {
		l.Step(ctx)
		select {
		case <-ctx.Done():
			l.release()
			return nil
		case <-tick.C:
		}
	}
}

// Step makes one attempt: renew when holding, else try to take the lease.
// Run calls it; tests may too.
func (l *Lease) Step(ctx context.Context) {
	before := l.Held()
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()

	start := l.cfg.Clock()
	cctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/3)
	defer cancel()
	var (
		newRev uint64
		err    error
	)
	if rev != 0 {
		newRev, err = l.kv.Update(cctx, l.cfg.Key, []byte(l.cfg.Holder), rev)
	} else {
		newRev, err = l.kv.Create(cctx, l.cfg.Key, []byte(l.cfg.Holder))
	}

	l.mu.Lock()
	switch {
	case err == nil:
		l.rev, l.validUntil = newRev, start.Add(l.cfg.TTL*3/4)
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		l.rev = 0 // someone else holds it (or took it after our entry expired)
	default:
		// Unreachable NATS or a timeout: keep the revision and try again;
		// Held turns false by itself once validUntil passes.
		l.cfg.Logger.Debug("lease write failed", "bucket", l.cfg.Bucket, "error", err)
	}
	l.mu.Unlock()

	if after := l.Held(); after != before {
		l.cfg.Logger.Info("analyzer lease", "held", after, "holder", l.cfg.Holder)
		if l.onChange != nil {
			l.onChange(after)
		}
	}
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
		l.cfg.Logger.Debug("lease release failed; it expires by itself", "error", err)
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
