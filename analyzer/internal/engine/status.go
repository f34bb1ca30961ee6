package engine

import (
	"slices"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// Status is the analyzer's live state, served as GET /v1/status.
type Status struct {
	// Ready: the window is rebuilt and the rollout log read.
	Ready bool `json:"ready"`
	// Leader: this analyzer holds the lease and publishes.
	Leader bool `json:"leader"`
	// LeaseVacantSeconds is how long no analyzer has held the lease as
	// this one sees it (0 while one does); NotReady why /readyz answers
	// 503, none when it answers 200 (SPEC §11 rev. 4).
	LeaseVacantSeconds float64  `json:"lease_vacant_seconds"`
	NotReady           []string `json:"not_ready,omitempty"`
	Source             string   `json:"source"`
	Consumer           string   `json:"consumer"`
	// Window, interval and the bucket width, in seconds; the window holds
	// the merged statistics of every gateway.
	WindowSeconds   float64 `json:"window_seconds"`
	IntervalSeconds float64 `json:"interval_seconds"`
	BucketSeconds   float64 `json:"bucket_seconds"`
	MinRequests     int     `json:"min_requests"`
	// ReplaySeconds and ReplayEvents describe the window's rebuild at
	// start (events: statistics read).
	ReplaySeconds float64 `json:"replay_seconds"`
	ReplayEvents  int64   `json:"replay_events"`
	// EpochsRebuilt: every epoch is rebuilt (from its checkpoint and the
	// replay since); until then every epoch verdict is inconclusive.
	EpochsRebuilt bool `json:"epochs_rebuilt"`
	// CheckpointBucket holds the epochs' checkpoints; Restored lists the
	// deployments whose epoch was restored from one at start,
	// LastCheckpoint when this analyzer last wrote them (as the lease
	// holder), CheckpointError why the last read or write failed.
	CheckpointBucket string     `json:"checkpoint_bucket"`
	Restored         []string   `json:"restored,omitempty"`
	LastCheckpoint   *time.Time `json:"last_checkpoint,omitempty"`
	CheckpointError  string     `json:"checkpoint_error,omitempty"`
	// Deployments holds the last evaluation of every deployment with a
	// gray release, in config order; LastAction the last rollout change
	// this analyzer made for it.
	Deployments []DeploymentStatus `json:"deployments"`
}

// DeploymentStatus is one deployment's last evaluation.
type DeploymentStatus struct {
	Evaluation
	LastAction *Action `json:"last_action,omitempty"`
}

// Status returns the live state. Deployments not evaluated yet appear with
// a zero EvaluatedAt and no gates.
func (e *Engine) Status() Status {
	took, n := e.ReplayStats()
	notReady := e.NotReady()
	s := Status{
		// Ready as /readyz answers: a vacant lease, a consumer not
		// consuming or not as declared make it false too.
		Ready:            e.Ready() && len(notReady) == 0,
		Leader:           e.Leading(),
		NotReady:         notReady,
		Source:           e.cfg.Source,
		Consumer:         e.cfg.Consumer,
		WindowSeconds:    e.cfg.Analyzer.Window.Seconds(),
		IntervalSeconds:  e.cfg.Analyzer.Interval.Seconds(),
		BucketSeconds:    e.agg.Width().Seconds(),
		MinRequests:      e.cfg.Analyzer.MinRequests,
		ReplaySeconds:    took.Seconds(),
		ReplayEvents:     n,
		EpochsRebuilt:    e.epochs.Rebuilt(),
		CheckpointBucket: e.cfg.EpochBucket,
		Deployments:      make([]DeploymentStatus, 0, len(e.cfg.Deployments)),
	}
	if l := e.leader.Load(); l != nil {
		s.LeaseVacantSeconds = (*l).Vacancy().Seconds()
	}
	e.cpMu.Lock()
	s.Restored = slices.Clone(e.restored)
	if !e.cpAt.IsZero() {
		at := e.cpAt
		s.LastCheckpoint = &at
	}
	s.CheckpointError = e.cpErr
	e.cpMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, dep := range e.cfg.Deployments {
		d := dep.Name
		ds := e.state[d]
		ev := ds.last
		ev.Deployment = d
		if ev.Gates == nil { // not evaluated yet: no gate, rather than null
			ev.Gates = []events.GateResult{}
		}
		ev.Rollout = nil
		if st, ok := e.rollouts.Get(d); ok { // the state now, not at the evaluation
			ev.Rollout = &st
		}
		s.Deployments = append(s.Deployments, DeploymentStatus{Evaluation: ev, LastAction: ds.lastAct})
	}
	return s
}
