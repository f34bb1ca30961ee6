package epoch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the key-value bucket the checkpoints live in: one key
// per deployment. It is not the lease bucket, whose entries expire.
const DefaultBucket = "graygate_analyzer_epochs"

// MaxBytes bounds the checkpoint bucket a missing one is created with
// (SPEC §11 rev. 4: no stream without a byte limit): one checkpoint per
// deployment, the latest only.
const MaxBytes = 256 << 20

// checkpointVersion is written in every checkpoint; one of another
// version is not restored.
const checkpointVersion = 1

// Checkpoint is a deployment's epoch as the lease holder writes it every
// minute: its merged statistics per period, where it began, its index and
// fingerprints, and the last statistic it holds (Seq, stored at SeqTime).
// A restarted analyzer restores it when the deployment's status has not
// changed since (StatusSince), then replays the statistics after Seq.
type Checkpoint struct {
	Version     int                  `json:"version"`
	Deployment  string               `json:"deployment"`
	Status      events.RolloutStatus `json:"status"`
	StatusSince time.Time            `json:"status_since"`
	Start       time.Time            `json:"start"`
	Index       int                  `json:"index"`
	// GrayFingerprint and PrimaryFingerprint are nil until a statistic
	// carried the side.
	GrayFingerprint    *string       `json:"gray_fingerprint"`
	PrimaryFingerprint *string       `json:"primary_fingerprint"`
	Periods            []PeriodStats `json:"periods"`
	Seen               []SeenPair    `json:"seen"`
	Seq                uint64        `json:"seq"`
	SeqTime            time.Time     `json:"seq_time"`
	WrittenAt          time.Time     `json:"written_at"`
	Note               string        `json:"note,omitempty"`
}

// PeriodStats is one percentage period of a checkpoint.
type PeriodStats struct {
	Start      time.Time         `json:"start"`
	Percentage float64           `json:"percentage"`
	Gray       []events.ArmStats `json:"gray"`
	Primary    []events.ArmStats `json:"primary"`
}

// SeenPair is a fingerprint pair and the last interval_start it was seen
// at.
type SeenPair struct {
	Gray    *string   `json:"gray"`
	Primary *string   `json:"primary"`
	Last    time.Time `json:"last"`
}

func fpPtr(f fingerprint) *string {
	if !f.set {
		return nil
	}
	v := f.v
	return &v
}

func fpOf(p *string) fingerprint {
	if p == nil {
		return fingerprint{}
	}
	return fingerprint{*p, true}
}

// Checkpoints returns the checkpoint of every deployment with an epoch,
// sorted by deployment, as of at; none while the epochs are being
// rebuilt (a partial epoch must not replace a whole one).
func (k *Keeper) Checkpoints(at time.Time) []Checkpoint {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.rebuilt {
		return nil
	}
	var out []Checkpoint
	for name, d := range k.deps {
		e := d.cur
		if e == nil {
			continue
		}
		cp := Checkpoint{
			Version: checkpointVersion, Deployment: name, Status: d.status, StatusSince: d.anchor,
			Start: e.start, Index: e.index, GrayFingerprint: fpPtr(e.gray), PrimaryFingerprint: fpPtr(e.primary),
			Seq: k.seq, SeqTime: k.stored, WrittenAt: at, Note: e.note,
		}
		for _, p := range e.periods {
			cp.Periods = append(cp.Periods, PeriodStats{Start: p.start, Percentage: p.pct, Gray: list(p.gray), Primary: list(p.primary)})
		}
		for _, s := range d.seen {
			cp.Seen = append(cp.Seen, SeenPair{Gray: fpPtr(s.gray), Primary: fpPtr(s.primary), Last: s.last})
		}
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b Checkpoint) int { return strings.Compare(a.Deployment, b.Deployment) })
	return out
}

func list(m map[gate.Class]*events.ArmStats) []events.ArmStats {
	out := make([]events.ArmStats, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b events.ArmStats) int {
		if a.Stream != b.Stream {
			if a.Stream {
				return 1
			}
			return -1
		}
		return strings.Compare(string(a.Endpoint), string(b.Endpoint))
	})
	return out
}

// Restore adopts the checkpoints of deployments whose epoch, as the
// rollout log has rebuilt it, is the one the checkpoint was written in
// (same status since the same time): its statistics, start, index,
// fingerprints and last statistic; the periods the log began after the
// checkpoint's last are kept. Call it once the rollout log is read and
// before any statistic is added. It returns the deployments restored.
func (k *Keeper) Restore(cps map[string]*Checkpoint) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var restored []string
	for name, cp := range cps {
		d := k.deps[name]
		if d == nil || d.cur == nil || cp == nil || cp.Version != checkpointVersion || len(cp.Periods) == 0 || cp.Index < 1 ||
			cp.Status != d.status || !cp.StatusSince.Equal(d.anchor) {
			continue
		}
		e := &epoch{start: cp.Start, index: cp.Index, gray: fpOf(cp.GrayFingerprint), primary: fpOf(cp.PrimaryFingerprint),
			seq: cp.Seq, restored: cp.SeqTime, note: cp.Note}
		for _, ps := range cp.Periods {
			p := newPeriod(ps.Start, ps.Percentage)
			for i := range ps.Gray {
				a := &ps.Gray[i]
				mergeInto(p.gray, gate.ClassOf(a), events.ArmGray, a)
			}
			for i := range ps.Primary {
				a := &ps.Primary[i]
				mergeInto(p.primary, gate.ClassOf(a), events.ArmPrimary, a)
			}
			e.periods = append(e.periods, p)
		}
		last := e.periods[len(e.periods)-1].start
		for _, p := range d.cur.periods {
			if p.start.After(last) {
				e.periods = append(e.periods, p)
			}
		}
		d.cur, d.k = e, max(d.k, cp.Index)
		d.seen = d.seen[:0]
		for _, s := range cp.Seen {
			d.seen = append(d.seen, seenPair{gray: fpOf(s.Gray), primary: fpOf(s.Primary), last: s.Last})
		}
		restored = append(restored, name)
	}
	slices.Sort(restored)
	return restored
}

// Store reads and writes checkpoints in a JetStream key-value bucket (one
// key per deployment), using only what nats-server 2.9 offers: Get is a
// direct get, Put a publish on $KV.<bucket>.<deployment>.
type Store struct {
	kv jetstream.KeyValue
}

// OpenStore binds to bucket, creating it when missing (history 1, no
// TTL: a checkpoint lives until the next replaces it). Without a deadline
// on ctx it waits at most 5 seconds.
func OpenStore(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*Store, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "graygate analyzer epoch checkpoints (SPEC §9 rev. 3)",
			History:     1,
			MaxBytes:    MaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another analyzer won the race
			kv, err = js.KeyValue(ctx, bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open checkpoint bucket %s: %w", bucket, err)
	}
	return &Store{kv: kv}, nil
}

// Load returns the checkpoints of deployments that have one. A
// checkpoint that does not decode is skipped and reported in the error,
// with the others returned.
func (s *Store) Load(ctx context.Context, deployments []string) (map[string]*Checkpoint, error) {
	out := map[string]*Checkpoint{}
	var errs []error
	for _, d := range deployments {
		entry, err := s.kv.Get(ctx, d)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read checkpoint of %s: %w", d, err))
			continue
		}
		var cp Checkpoint
		if err := json.Unmarshal(entry.Value(), &cp); err != nil || cp.Deployment != d {
			errs = append(errs, fmt.Errorf("checkpoint of %s does not decode: %v", d, err))
			continue
		}
		out[d] = &cp
	}
	return out, errors.Join(errs...)
}

// Save writes cps, each under its deployment's key.
func (s *Store) Save(ctx context.Context, cps []Checkpoint) error {
	var errs []error
	for i := range cps {
		b, err := json.Marshal(&cps[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("encode checkpoint of %s: %w", cps[i].Deployment, err))
			continue
		}
		if _, err := s.kv.Put(ctx, cps[i].Deployment, b); err != nil {
			errs = append(errs, fmt.Errorf("write checkpoint of %s: %w", cps[i].Deployment, err))
		}
	}
	return errors.Join(errs...)
}
