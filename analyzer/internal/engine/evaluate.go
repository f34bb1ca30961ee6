package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/rollout"
	"github.com/graygate/graygate/analyzer/internal/window"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
	"github.com/nats-io/nats.go/jetstream"
)

// Evaluation is one deployment's gate values at one moment.
type Evaluation struct {
	Deployment string    `json:"deployment"`
	At         time.Time `json:"evaluated_at"`
	// Rollout is the state the evaluation saw; nil before the log has an
	// event for the deployment.
	Rollout *rollout.State `json:"rollout"`
	// WindowStart is where the window began: now − window, or the last
	// status change or the epoch's start when later (rounded up to a
	// bucket boundary).
	WindowStart   time.Time `json:"window_start"`
	WindowSeconds float64   `json:"window_seconds"`
	// GrayRequests and PrimaryRequests count the attempts in the window
	// (gray: gray and shadow).
	GrayRequests    int64 `json:"gray_requests"`
	PrimaryRequests int64 `json:"primary_requests"`
	// Gates holds one result per gate and stream class: {gate, stream,
	// estimate, bound, threshold, gray_n, primary_n, verdict} of the
	// deciding layer, and each layer's (window, epoch) with needs_gray.
	Gates   []events.GateResult `json:"gates"`
	Verdict events.Verdict      `json:"verdict"`
	// Epoch is the epoch the gates judged; nil when the deployment has
	// none (rolled back, or no rollout event yet).
	Epoch *events.EpochInfo `json:"epoch,omitempty"`
	// StepSince is when the current percentage step began; StepSeconds
	// the time on it.
	StepSince   *time.Time `json:"step_since,omitempty"`
	StepSeconds float64    `json:"step_seconds,omitempty"`
	// PassingSince is the start of an unbroken run of evaluations since the
	// last rollout change at which every gate passed on the epoch (the
	// promotion hold); nil otherwise.
	PassingSince *time.Time `json:"passing_since,omitempty"`
	// Published is true when the evaluation was stored as an
	// analysis.evaluated event at once; false when it was not published,
	// or was queued to be sent again (the event log did not store it, or
	// others wait before it).
	Published bool `json:"published"`
	// Action is what this evaluation made the analyzer do; nil mostly.
	Action *Action `json:"action,omitempty"`
}

// Action is a rollout change the analyzer published (or tried to).
type Action struct {
	// Kind is "rollback" or "promotion".
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
	// From is the revision the change was made from; Revision the
	// sequence it was stored at (0 when it was not).
	From       uint64  `json:"from_revision"`
	Revision   uint64  `json:"revision"`
	Percentage float64 `json:"percentage"`
	Reason     string  `json:"reason"`
	// Error says why it was not stored; empty on success.
	Error string `json:"error,omitempty"`
}

// Action kinds.
const (
	ActionRollback  = "rollback"
	ActionPromotion = "promotion"
)

// Evaluate runs one evaluation round over every deployment with a gray
// release and returns the evaluations, in config order. Every analyzer
// evaluates (for /v1/status and metrics); only the lease holder, and only
// once the window is rebuilt and the rollout log read, publishes: the
// evaluation of each deployment with gray attempts in its window and an
// active or testing (or not yet recorded) rollout, then at most one
// rollout change.
func (e *Engine) Evaluate(ctx context.Context) []Evaluation {
	now := e.cfg.Clock()
	act := e.Ready() && e.Leading()
	out := make([]Evaluation, 0, len(e.cfg.Deployments))
	for _, d := range e.cfg.Deployments {
		out = append(out, e.evaluate(ctx, d, now, act, false))
	}
	return out
}

// EvaluateUrgent evaluates the deployments a gray schema failure or a
// gray failure of gate 5 (upstream_5xx, timeout, upstream_error) arrived
// for since the last call, at once rather than at the next interval (SPEC
// §9, §12; rev. 4 "Early gate-5 looks"). It acts only on gates 2 and 5:
// when schema_failure_rate or gray_error_rate fails, the evaluation is
// published and the deployment rolled back with it as the trigger;
// otherwise nothing is published or recorded, so the other gates are
// looked at only every interval (their error budget counts those looks). It returns the evaluations that acted.
func (e *Engine) EvaluateUrgent(ctx context.Context) []Evaluation {
	now := e.cfg.Clock()
	act := e.Ready() && e.Leading()
	var out []Evaluation
	for _, d := range e.takeUrgent() {
		if ev := e.evaluate(ctx, d, now, act, true); ev.Published || ev.Action != nil {
			out = append(out, ev)
		}
	}
	return out
}

// evaluate tests one deployment on both layers: its window (now − window,
// or its last status change or its epoch's start when later) and its
// epoch. urgent restricts it to gate 2 (EvaluateUrgent), at a look of one
// second.
func (e *Engine) evaluate(ctx context.Context, d Deployment, now time.Time, act, urgent bool) Evaluation {
	st, known := e.rollouts.Get(d.Name)
	evaluable := !known || st.Active() || st.Testing()
	if urgent {
		// Only a rollback can follow: skip the work when none could.
		e.mu.Lock()
		ds := e.state[d.Name]
		pending := ds.acted && ds.actedFrom == st.Revision
		e.mu.Unlock()
		if !act || !evaluable || pending {
			return Evaluation{Deployment: d.Name, At: now}
		}
	}
	view, hasEpoch := e.epochs.View(d.Name)
	since := now.Add(-e.cfg.Analyzer.Window)
	if known && st.StatusSince.After(since) {
		since = st.StatusSince
	}
	if hasEpoch && view.Epoch.Start.After(since) {
		// A new pair of fingerprints: the old version's statistics are
		// not the gray's any more (SPEC §7).
		since = view.Epoch.Start
	}
	snap := e.agg.Snapshot(d.Name, since, now)
	in := gate.Input{Gray: snap.Gray, Primary: snap.Primary}
	look := gate.Look{Day: gate.DayOf(st.RolloutSince, now), Seconds: e.cfg.Analyzer.Interval.Seconds()}
	if urgent {
		// An early look: the other tests spend nothing here (their budget
		// is counted in the regular looks) and cannot fail on the window;
		// gates 2 and 5 spend the seconds since their last look
		// (gate.Look).
		look.Seconds = 0
	}
	errs, schema := e.sinceLooks(d.Name, now, urgent)
	look = look.WithErrorSeconds(errs).WithSchemaSeconds(schema)
	var ep *gate.Epoch
	if hasEpoch {
		ep = &view.Epoch
	}
	results := e.cfg.Evaluate(d, &in, ep, look)
	ev := Evaluation{
		Deployment:      d.Name,
		At:              now,
		WindowStart:     snap.Start,
		WindowSeconds:   max(snap.End.Sub(snap.Start), e.agg.Width()).Seconds(),
		GrayRequests:    window.Requests(snap.Gray),
		PrimaryRequests: window.Requests(snap.Primary),
		Gates:           results,
		Verdict:         events.OverallVerdict(results),
	}
	if known {
		ev.Rollout = &st
	}
	if hasEpoch {
		info := view.Info
		ev.Epoch = &info
		if !view.StepSince.IsZero() {
			step := view.StepSince
			ev.StepSince = &step
			ev.StepSeconds = max(now.Sub(step), 0).Seconds()
		}
	}
	failure := gate.FirstFailure
	if urgent {
		failure = earlyFailure
		if _, failed := failure(results); !failed || ev.GrayRequests == 0 {
			return ev
		}
	}
	e.m.observe(&ev)

	e.mu.Lock()
	ds := e.state[d.Name]
	if k := (stateKey{st.Status, st.Percentage, st.Hold}); ds.state != k {
		ds.state, ds.passingSince = k, time.Time{}
	}
	switch {
	case urgent:
		// An urgent look judges gate 2 on the window alone: it neither
		// starts nor breaks the hold.
	case !hasEpoch || !gate.PromotionReady(results):
		ds.passingSince = time.Time{}
	case ds.passingSince.IsZero():
		ds.passingSince = now
	}
	if !ds.passingSince.IsZero() {
		p := ds.passingSince
		ev.PassingSince = &p
	}
	pending := ds.acted && ds.actedFrom == st.Revision
	passing := ds.passingSince
	e.mu.Unlock()

	if act && ev.GrayRequests > 0 && evaluable {
		ev.Published = e.publishAnalysis(ctx, &ev)
		if !pending {
			var epv *gate.Epoch
			if hasEpoch {
				epv = &view.Epoch
			}
			ev.Action = e.decide(ctx, d.Name, st, &ev, now, passing, epv, failure, !urgent)
		}
	}

	e.mu.Lock()
	if ev.Action != nil {
		ds.acted, ds.actedFrom, ds.lastAct = true, st.Revision, ev.Action
		if ev.Action.Kind == ActionPromotion && ev.Action.Error == "" {
			ds.passingSince = time.Time{} // hold again at the new step
		}
	}
	ds.last = ev
	e.mu.Unlock()
	return ev
}

// earlyFailure returns the first failing result of the gates an early
// look acts on: schema_failure_rate and gray_error_rate.
func earlyFailure(results []events.GateResult) (events.GateResult, bool) {
	for _, r := range results {
		if (r.Gate == events.GateSchemaFailureRate || r.Gate == events.GateGrayErrorRate) && r.Verdict == events.VerdictFail {
			return r, true
		}
	}
	return events.GateResult{}, false
}

// sinceLooks returns what gates 5 and 2 spend at a look of d at now (SPEC
// §9 rev. 4), and records now as their last look: for each, the seconds
// since its previous look, at most one interval (the first look, and a
// regular look after a pause, spend one interval, as every other test
// does); an early look with no look before it spends one second, its
// least spacing.
func (e *Engine) sinceLooks(d string, now time.Time, early bool) (errs, schema float64) {
	iv := e.cfg.Analyzer.Interval.Seconds()
	e.mu.Lock()
	defer e.mu.Unlock()
	ds := e.state[d]
	since := func(last *time.Time) float64 {
		s := iv
		switch {
		case !last.IsZero():
			s = min(max(now.Sub(*last).Seconds(), 0), iv)
		case early:
			s = min(urgentEvery.Seconds(), iv)
		}
		if now.After(*last) {
			*last = now
		}
		return s
	}
	return since(&ds.errorsLooked), since(&ds.schemaLooked)
}

// decide publishes a rollback when a gate failed (the first that failure
// returns), or — when promote and the deployment is active — a promotion
// when the rule of SPEC §9 rev. 3 allows a step (gate.NextStep: every
// gate passed on the epoch at every evaluation of the last hold; the step
// to 100 % also after min_soak since the epoch began, never below
// min_percentage in it); nil when neither is due. Errors other than a
// revision conflict leave nothing recorded, so the next evaluation tries
// again.
func (e *Engine) decide(ctx context.Context, d string, st rollout.State, ev *Evaluation, now, passingSince time.Time, ep *gate.Epoch,
	failure func([]events.GateResult) (events.GateResult, bool), promote bool) *Action {
	if failed, ok := failure(ev.Gates); ok {
		bound := 0.0
		if failed.Bound != nil {
			bound = *failed.Bound
		}
		estimate := bound
		if failed.Estimate != nil {
			estimate = *failed.Estimate
		}
		judged := time.Duration(ev.WindowSeconds * float64(time.Second))
		layer := "window"
		if failed.Window != nil && failed.Window.Verdict != events.VerdictFail && failed.Epoch != nil && failed.Epoch.Verdict == events.VerdictFail && ep != nil {
			layer, judged = "epoch", max(now.Sub(ep.Start), time.Second)
		}
		change := &events.RolloutChanged{
			Deployment: d,
			Percentage: 0,
			Status:     events.StatusRolledBack,
			Reason:     rollbackReason(failed, estimate, bound, layer, judged),
			Actor:      events.ActorAnalyzer,
			Revision:   st.Revision,
			Trigger: &events.GateTrigger{
				Gate: failed.Gate, Stream: failed.Stream, Estimate: estimate, Bound: bound,
				Threshold: failed.Threshold, WindowSeconds: judged.Seconds(),
			},
		}
		a := e.publishChange(ctx, ActionRollback, change, now)
		if a != nil && a.Error == "" {
			e.m.rollback(d, failed.Gate)
		}
		return a
	}
	p := e.cfg.Analyzer.Promotion
	// A held rollout (SPEC §3 rev. 4) is rolled back above, never promoted;
	// nor is one at 0 %, the emergency stop (SPEC §6.1): no gray request
	// reaches it, so what the gates passed on predates the stop.
	stopped := st.Percentage == 0
	if !promote || st.Testing() || st.Hold || stopped || p == nil || ep == nil || !gate.PromotionReady(ev.Gates) || passingSince.IsZero() {
		return nil
	}
	next, ok := gate.NextStep(p, gate.PromotionState{
		Percentage:         st.Percentage,
		Passing:            now.Sub(passingSince),
		EpochAge:           now.Sub(ep.Start),
		EpochMinPercentage: ep.MinPercentage(),
	})
	if !ok {
		return nil
	}
	var gray int64
	if ev.Epoch != nil {
		gray = ev.Epoch.GrayRequests
	}
	change := &events.RolloutChanged{
		Deployment: d,
		Percentage: next,
		Status:     events.StatusActive,
		Reason: fmt.Sprintf("promotion from %s%% to %s%%: every gate passed on the epoch (%s, %s gray requests) for %s",
			strconv.FormatFloat(st.Percentage, 'f', -1, 64), strconv.FormatFloat(next, 'f', -1, 64),
			ShortDuration(now.Sub(ep.Start)), Thousands(gray), ShortDuration(now.Sub(passingSince))),
		Actor:    events.ActorAnalyzer,
		Revision: st.Revision,
	}
	a := e.publishChange(ctx, ActionPromotion, change, now)
	if a != nil && a.Error == "" {
		e.m.promotion(d)
	}
	return a
}

// rollbackReason says why a gate rolled a gray back, for the rollout
// event's reason: the gate, its estimate, bound and threshold, and the
// attempts behind them in the layer that failed — the window, or the
// epoch — and its length (primary's only for the gates that compare with
// primary).
func rollbackReason(failed events.GateResult, estimate, bound float64, layer string, judged time.Duration) string {
	attempts := fmt.Sprintf("%d gray attempts", failed.GrayN)
	switch failed.Gate {
	case events.GateSchemaFailureRate, events.GateTTFTP99:
		// One-sample gates: primary's attempts play no part.
	default:
		attempts = fmt.Sprintf("%d gray and %d primary attempts", failed.GrayN, failed.PrimaryN)
	}
	where := fmt.Sprintf("in a %s window", ShortDuration(judged))
	if layer == "epoch" {
		where = fmt.Sprintf("in the epoch of %s", ShortDuration(judged))
	}
	at := ""
	if failed.Quantile != nil {
		at = " at the " + QuantileName(*failed.Quantile)
	}
	if failed.Band != "" {
		at += " in band " + failed.Band
	}
	return fmt.Sprintf("gate %s%s failed%s: estimate %s, bound %s above the threshold %s (%s %s)",
		failed.Gate, streamSuffixes.Of(failed.Stream), at, fmtValue(failed.Gate, estimate), fmtValue(failed.Gate, bound),
		fmtValue(failed.Gate, failed.Threshold), attempts, where)
}

// QuantileName writes a quantile as people name it: 0.99 is "p99", 0.5
// "p50".
func QuantileName(q float64) string {
	return "p" + strconv.FormatFloat(q*100, 'f', -1, 64)
}

// ShortDuration writes d for people, to the second, without zero units:
// 5m, 22s, 3h12m.
func ShortDuration(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Thousands writes n with a comma every three digits: 12,400.
func Thousands(n int64) string { return text.Thousands(n) }

// streamSuffixes follow a gate's name in a rollback's reason.
var streamSuffixes = gate.StreamClassNames{gate.AllAttempts: "", gate.NonStreamed: " (not streamed)", gate.Streamed: " (streamed)"}

// publishChange appends a rollout change expecting change.Revision as the
// subject's last sequence, so it never overwrites a change it has not
// seen. It returns nil after a transient failure (try again next time),
// and an Action carrying the error after a conflict (the newer change is
// on its way through the log).
func (e *Engine) publishChange(ctx context.Context, kind string, change *events.RolloutChanged, now time.Time) *Action {
	a := &Action{Kind: kind, At: now, From: change.Revision, Percentage: change.Percentage, Reason: change.Reason}
	// Read the lease back right before the append (SPEC §11 rev. 4): a
	// process that was paused or cut off since it decided does not act.
	l := e.leader.Load()
	if l == nil {
		return nil
	}
	ref, err := (*l).Confirm(ctx)
	if err != nil {
		e.cfg.Logger.Warn("rollout change not made: the lease is not confirmed", "kind", kind, "deployment", change.Deployment, "error", err)
		return nil
	}
	change.Lease = &ref
	prev := change.Revision
	change.PrevRevision = &prev // signed with the event: a replay is refused (SPEC §7 rev. 4)
	seq, _, err := events.PublishSigned(ctx, e.js, e.cfg.Source, change, now, e.cfg.SigningKey, jetstream.WithExpectLastSequencePerSubject(change.Revision))
	switch {
	case err == nil:
		a.Revision = seq
		e.cfg.Logger.Info("rollout changed", "kind", kind, "deployment", change.Deployment, "status", change.Status,
			"percentage", change.Percentage, "revision", seq, "reason", change.Reason)
		return a
	case events.IsWrongLastSequence(err):
		a.Error = "revision conflict: the rollout changed since revision " + strconv.FormatUint(change.Revision, 10)
		e.cfg.Logger.Info("rollout change not made: the log moved on", "kind", kind, "deployment", change.Deployment,
			"from_revision", change.Revision)
		return a
	default:
		e.m.publishError("rollout")
		e.cfg.Logger.Warn("publish rollout change", "kind", kind, "deployment", change.Deployment, "error", err)
		return nil
	}
}

// publishAnalysis publishes ev as an analysis.evaluated event.
func (e *Engine) publishAnalysis(ctx context.Context, ev *Evaluation) bool {
	data := &events.AnalysisEvaluated{
		Deployment:      ev.Deployment,
		WindowStart:     ev.WindowStart,
		WindowSeconds:   ev.WindowSeconds,
		GrayRequests:    ev.GrayRequests,
		PrimaryRequests: ev.PrimaryRequests,
		Gates:           ev.Gates,
		Verdict:         ev.Verdict,
		Epoch:           ev.Epoch,
		StepSince:       ev.StepSince,
		StepSeconds:     ev.StepSeconds,
		PassingSince:    ev.PassingSince,
	}
	if p := e.cfg.Analyzer.Promotion; p != nil {
		data.Promotion = &events.PromotionRule{Steps: p.Steps, HoldSeconds: p.Hold.Seconds(),
			MinSoakSeconds: p.MinSoak.Seconds(), MinPercentage: p.MinPercentage}
	}
	q, err := encodeEvent(e.cfg.Source, data, ev.At)
	if err != nil {
		e.m.publishError("analysis")
		e.cfg.Logger.Error("analysis event not encodable", "deployment", ev.Deployment, "error", err)
		return false
	}
	stored, err := e.outbox.send(ctx, q)
	if err != nil {
		e.m.publishError("analysis")
		e.cfg.Logger.Warn("analysis event not stored: queued to be sent again", "deployment", ev.Deployment,
			"queued", e.outbox.Len(), "error", err)
	}
	return stored
}

// publish stores one event and returns its stream sequence.
func (e *Engine) publish(ctx context.Context, data events.Data, at time.Time, opts ...jetstream.PublishOpt) (uint64, error) {
	seq, _, err := events.Publish(ctx, e.js, e.cfg.Source, data, at, opts...)
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", data.EventType(), err)
	}
	return seq, nil
}

// fmtValue writes a gate value for people: ratios as percentages, ttft_p99
// in seconds.
func fmtValue(g events.Gate, v float64) string {
	switch g {
	case events.GateTTFTP99:
		return strconv.FormatFloat(v, 'f', 3, 64) + "s"
	case events.GateTTFTP99Ratio, events.GateLatencyP99Ratio:
		return strconv.FormatFloat(v, 'f', 2, 64) + "x"
	default:
		return strconv.FormatFloat(v*100, 'f', 2, 64) + "%"
	}
}
