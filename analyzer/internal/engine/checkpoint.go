package engine

import (
	"context"
	"time"

	"github.com/graygate/graygate/analyzer/internal/epoch"
	"github.com/graygate/graygate/schemas/tick"
)

// prepareEpochs runs once, before the first statistics consumer is made:
// it waits until the rollout log is read (the epochs' starts and periods
// come from it), reads the checkpoints and restores those of epochs that
// are still current. A bucket that cannot be read is logged and the
// epochs are rebuilt from the stream alone; it returns an error only when
// ctx ends.
func (e *Engine) prepareEpochs(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-e.rollouts.Ready():
	}
	e.prepareMu.Lock()
	defer e.prepareMu.Unlock()
	if e.prepared {
		return nil
	}
	names := make([]string, len(e.cfg.Deployments))
	for i, d := range e.cfg.Deployments {
		names[i] = d.Name
	}
	store, err := e.openCheckpoints(ctx)
	if err == nil {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cps, lerr := store.Load(lctx, names)
		cancel()
		if lerr != nil {
			e.checkpointFailed("read checkpoints", lerr)
		}
		restored := e.epochs.Restore(cps)
		e.cpMu.Lock()
		e.restored = restored
		e.cpMu.Unlock()
		if len(restored) > 0 {
			e.cfg.Logger.Info("epochs restored from their checkpoints; replaying the statistics since", "deployments", restored)
		}
	}
	e.prepared = true
	return nil
}

// openCheckpoints returns the checkpoint bucket, opening (and creating)
// it when it is not open yet.
func (e *Engine) openCheckpoints(ctx context.Context) (*epoch.Store, error) {
	if s := e.checkpoints.Load(); s != nil {
		return s, nil
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := epoch.OpenStore(octx, e.js, e.cfg.EpochBucket, e.cfg.Replicas)
	if err != nil {
		e.checkpointFailed("open the checkpoint bucket", err)
		return nil, err
	}
	e.checkpoints.Store(s)
	return s, nil
}

func (e *Engine) checkpointFailed(what string, err error) {
	e.cfg.Logger.Warn(what, "bucket", e.cfg.EpochBucket, "error", err)
	e.cpMu.Lock()
	e.cpErr = what + ": " + err.Error()
	e.cpMu.Unlock()
}

// keepCheckpoints writes every epoch's checkpoint each CheckpointEvery
// while this analyzer holds the lease, until ctx ends.
func (e *Engine) keepCheckpoints(ctx context.Context) error {
	tick.Every(ctx, e.cfg.CheckpointEvery, func() bool {
		e.Checkpoint(ctx)
		return true
	})
	return nil
}

// Checkpoint writes every epoch's checkpoint now when this analyzer holds
// the lease and its epochs are rebuilt (a partial epoch never replaces a
// whole one); it reports whether it wrote them.
func (e *Engine) Checkpoint(ctx context.Context) bool {
	if !e.Leading() || !e.epochs.Rebuilt() {
		return false
	}
	cps := e.epochs.Checkpoints(e.cfg.Clock())
	if len(cps) == 0 {
		return false
	}
	store, err := e.openCheckpoints(ctx)
	if err != nil {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := store.Save(sctx, cps); err != nil {
		e.m.publishError("checkpoint")
		e.checkpointFailed("write checkpoints", err)
		return false
	}
	e.cpMu.Lock()
	e.cpAt, e.cpErr = e.cfg.Clock(), ""
	e.cpMu.Unlock()
	return true
}
