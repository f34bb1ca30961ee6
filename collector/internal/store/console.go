package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/graygate/graygate/schemas/events"
)

// The console's queries (SPEC §8 rev. 3): what the operator's console draws
// from the tables the collector already fills. Each reads a bounded number
// of rows: a chart's series are binned in SQL when a range holds more rows
// than the chart draws.

// Evaluation is one stored analysis evaluation.
type Evaluation struct {
	EventID         string
	OccurredAt      time.Time
	WindowStart     time.Time
	WindowSeconds   float64
	GrayRequests    int64
	PrimaryRequests int64
	Verdict         string
	// Gates are the evaluation's gates as published.
	Gates []events.GateResult
	// Epoch, StepSince, PassingSince and Promotion are as published
	// (migration 7); nil from analyzers that did not send them.
	Epoch        *events.EpochInfo
	StepSince    *time.Time
	PassingSince *time.Time
	Promotion    *events.PromotionRule
}

// RolloutSummary is a deployment's rollout as the console's first page
// shows it: its last rollout event, the last event that spoke of the hold,
// when its current epoch and step began (derived from the rollout events:
// the last change of status to active or testing, the last change of
// status or percentage), and its latest evaluation (nil when it has none).
type RolloutSummary struct {
	Deployment string
	Last       RolloutEvent
	// HoldEvent is the last event that held or released the rollout (SPEC
	// §3 rev. 4), nil when none did; events without a hold leave it as
	// it was, as the gateways' fold does.
	HoldEvent *RolloutEvent
	// EpochStart is zero when the status is rolled_back; LastEpochStart
	// is the start of the last epoch even then (zero when the deployment
	// was never active or testing).
	EpochStart     time.Time
	LastEpochStart time.Time
	StepStart      time.Time
	Latest         *Evaluation
}

// Held reports whether the rollout is held: the last event that spoke of
// the hold held it.
func (s RolloutSummary) Held() bool {
	return s.HoldEvent != nil && s.HoldEvent.Hold != nil && *s.HoldEvent.Hold
}

// Rollouts returns every deployment with rollout events, by name, or only
// deployment when it is not "".
func (r *Reader) Rollouts(ctx context.Context, deployment string) ([]RolloutSummary, error) {
	rows, err := r.pool.Query(ctx, `WITH e AS (
			SELECT deployment, stream_seq, occurred_at, status, percentage,
				lag(status) OVER w AS prev_status, lag(percentage) OVER w AS prev_percentage
			FROM rollout_events WHERE $2 = '' OR deployment = $2 WINDOW w AS (PARTITION BY deployment ORDER BY stream_seq, occurred_at))
		SELECT deployment,
			(array_agg(occurred_at ORDER BY stream_seq DESC) FILTER (WHERE status IN ('active', 'testing') AND status IS DISTINCT FROM prev_status))[1],
			(array_agg(occurred_at ORDER BY stream_seq DESC) FILTER (WHERE status IS DISTINCT FROM prev_status OR percentage IS DISTINCT FROM prev_percentage))[1]
		FROM e GROUP BY deployment ORDER BY deployment LIMIT $1`, MaxPage, deployment)
	if err != nil {
		return nil, fmt.Errorf("list rollouts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RolloutSummary, error) {
		var s RolloutSummary
		var epoch, step *time.Time
		err := row.Scan(&s.Deployment, &epoch, &step)
		s.EpochStart, s.StepStart = deref(epoch).UTC(), deref(step).UTC()
		s.LastEpochStart = s.EpochStart
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("list rollouts: %w", err)
	}
	for i := range out {
		s := &out[i]
		page, err := r.RolloutHistory(ctx, s.Deployment, 1, "")
		if err != nil {
			return nil, err
		}
		if len(page.Events) == 1 {
			s.Last = page.Events[0]
		}
		if s.Last.Status == string(events.StatusRolledBack) {
			s.EpochStart = time.Time{}
		}
		if s.HoldEvent, err = r.lastHold(ctx, s.Deployment); err != nil {
			return nil, err
		}
		if s.Latest, err = r.LatestEvaluation(ctx, s.Deployment); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// lastHold returns deployment's last rollout event that held or released
// it, in the order of the fold (stream sequence), nil when none did.
func (r *Reader) lastHold(ctx context.Context, deployment string) (*RolloutEvent, error) {
	evs, err := queryRows(ctx, r, "hold of "+deployment, collectRollouts, `SELECT `+rolloutColumns+` FROM rollout_events
		WHERE deployment = $1 AND hold IS NOT NULL ORDER BY stream_seq DESC, occurred_at DESC LIMIT 1`, deployment)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, nil
	}
	return &evs[0], nil
}

// LatestEvaluation returns deployment's newest evaluation, nil when none is
// stored.
func (r *Reader) LatestEvaluation(ctx context.Context, deployment string) (*Evaluation, error) {
	var e Evaluation
	var id pgtype.UUID
	var gates, epoch, promotion []byte
	err := r.pool.QueryRow(ctx, `SELECT event_id, occurred_at, window_start, window_seconds, gray_requests,
		primary_requests, verdict, gates, epoch, step_since, passing_since, promotion FROM analysis_evaluations
		WHERE deployment = $1 ORDER BY occurred_at DESC LIMIT 1`, deployment).Scan(&id, &e.OccurredAt, &e.WindowStart,
		&e.WindowSeconds, &e.GrayRequests, &e.PrimaryRequests, &e.Verdict, &gates, &epoch, &e.StepSince, &e.PassingSince, &promotion)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("latest evaluation of %s: %w", deployment, err)
	}
	if err := json.Unmarshal(gates, &e.Gates); err != nil {
		return nil, fmt.Errorf("latest evaluation of %s: gates: %w", deployment, err)
	}
	if epoch != nil {
		e.Epoch = &events.EpochInfo{}
		if err := json.Unmarshal(epoch, e.Epoch); err != nil {
			return nil, fmt.Errorf("latest evaluation of %s: epoch: %w", deployment, err)
		}
	}
	if promotion != nil {
		e.Promotion = &events.PromotionRule{}
		if err := json.Unmarshal(promotion, e.Promotion); err != nil {
			return nil, fmt.Errorf("latest evaluation of %s: promotion: %w", deployment, err)
		}
	}
	for _, t := range []**time.Time{&e.StepSince, &e.PassingSince} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	e.EventID = uuid.UUID(id.Bytes).String()
	e.OccurredAt, e.WindowStart = e.OccurredAt.UTC(), e.WindowStart.UTC()
	return &e, nil
}

// HistoryStart returns the time of deployment's oldest stored rollout event
// or evaluation; zero when it has neither.
func (r *Reader) HistoryStart(ctx context.Context, deployment string) (time.Time, error) {
	var t *time.Time
	err := r.pool.QueryRow(ctx, `SELECT least(
		(SELECT min(occurred_at) FROM rollout_events WHERE deployment = $1),
		(SELECT min(occurred_at) FROM analysis_evaluations WHERE deployment = $1))`, deployment).Scan(&t)
	if err != nil {
		return time.Time{}, fmt.Errorf("history start of %s: %w", deployment, err)
	}
	return deref(t).UTC(), nil
}

// GatePoint is one point of a gate's series: one evaluation, or the mean of
// the N evaluations of a bin. Fail is set when any of them failed.
type GatePoint struct {
	At              time.Time
	Gate            string
	Stream          *bool
	Estimate, Bound *float64
	Threshold       float64
	WindowBound     *float64
	EpochBound      *float64
	N               int
	Fail, Pass      bool
	GrayN, PrimaryN int64
	WindowVerdict   string
	EpochVerdict    string
}

// GateSeries returns deployment's gate results in [since, until), oldest
// first: one point per evaluation when the range holds at most maxPoints
// evaluations, else the evaluations binned into at most maxPoints equal
// spans of time (means, Fail when any failed). It reports how many
// evaluations the range holds.
func (r *Reader) GateSeries(ctx context.Context, deployment string, since, until time.Time, maxPoints int) ([]GatePoint, int, error) {
	var total int
	var out []GatePoint
	err := r.serially(ctx, func(tx pgx.Tx) error {
		return r.gateSeries(ctx, tx, deployment, since, until, maxPoints, &out, &total)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("gate series of %s: %w", deployment, err)
	}
	return out, total, nil
}

func (r *Reader) gateSeries(ctx context.Context, tx pgx.Tx, deployment string, since, until time.Time, maxPoints int,
	out *[]GatePoint, total *int) error {
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM analysis_evaluations
		WHERE deployment = $1 AND occurred_at >= $2 AND occurred_at < $3`, deployment, since, until).Scan(total); err != nil {
		return err
	}
	// Raw: each evaluation is its own group (its event id); binned: a span
	// of time with date_bin.
	group := `e.event_id::text`
	args := []any{deployment, since, until}
	if *total > maxPoints {
		group = `date_bin($4::interval, e.occurred_at, $2)::text`
		args = append(args, binWidth(since, until, maxPoints))
	}
	rows, err := tx.Query(ctx, `SELECT max(e.occurred_at), g->>'gate', (g->>'stream')::boolean,
			avg((g->>'estimate')::float8), avg((g->>'bound')::float8), avg((g->>'threshold')::float8),
			avg((g->'window'->>'bound')::float8), avg((g->'epoch'->>'bound')::float8),
			count(*), bool_or(g->>'verdict' = 'fail'), bool_and(g->>'verdict' IN ('pass', 'not_applicable')),
			max((g->>'gray_n')::bigint), max((g->>'primary_n')::bigint),
			(array_agg(g->'window'->>'verdict' ORDER BY e.occurred_at DESC))[1],
			(array_agg(g->'epoch'->>'verdict' ORDER BY e.occurred_at DESC))[1]
		FROM analysis_evaluations e, jsonb_array_elements(e.gates) g
		WHERE e.deployment = $1 AND e.occurred_at >= $2 AND e.occurred_at < $3
		GROUP BY `+group+`, g->>'gate', g->>'stream'
		ORDER BY 1`, args...)
	if err != nil {
		return err
	}
	*out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (GatePoint, error) {
		var p GatePoint
		var threshold *float64
		var gray, primary *int64
		var wv, ev *string
		err := row.Scan(&p.At, &p.Gate, &p.Stream, &p.Estimate, &p.Bound, &threshold, &p.WindowBound, &p.EpochBound,
			&p.N, &p.Fail, &p.Pass, &gray, &primary, &wv, &ev)
		p.At, p.Threshold, p.GrayN, p.PrimaryN = p.At.UTC(), deref(threshold), deref(gray), deref(primary)
		p.WindowVerdict, p.EpochVerdict = deref(wv), deref(ev)
		return p, err
	})
	return err
}

// ArmBin is the attempts of one arm in one bin of time, by outcome.
type ArmBin struct {
	At       time.Time
	Arm      string
	Outcomes map[string]int64
}

// ArmSeries returns deployment's attempts per arm and outcome from
// arm_stats in [since, until), oldest first, summed into bins of width
// (at least a minute; wider when the range would need more than maxBins).
// It returns the width used.
func (r *Reader) ArmSeries(ctx context.Context, deployment string, since, until time.Time, maxBins int) ([]ArmBin, time.Duration, error) {
	// Whole minutes, rounded up, so the bins never outnumber maxBins.
	width := (binWidth(since, until, maxBins) + time.Minute - 1).Truncate(time.Minute)
	// A row's outcomes per arm as the writer summed them (migration 7),
	// else, for a row stored before, from its entries.
	var out []ArmBin
	err := r.serially(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT date_bin($4::interval, s.occurred_at, $2) AS b, o.arm, o.outcome, sum(o.n)
			FROM arm_stats s, LATERAL (
				SELECT a.key AS arm, x.key AS outcome, x.value::bigint AS n
				FROM jsonb_each(s.outcomes) a, jsonb_each_text(a.value) x WHERE s.outcomes IS NOT NULL
				UNION ALL
				SELECT a->>'arm', x.key, x.value::bigint
				FROM jsonb_array_elements(s.data->'arms') a, jsonb_each_text(a->'outcomes') x WHERE s.outcomes IS NULL) o
			WHERE s.deployment = $1 AND s.occurred_at >= $2 AND s.occurred_at < $3
			GROUP BY 1, 2, 3 ORDER BY 1, 2`, deployment, since, until, width)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var at time.Time
			var arm, outcome string
			var n int64
			if err := rows.Scan(&at, &arm, &outcome, &n); err != nil {
				return err
			}
			at = at.UTC()
			if len(out) == 0 || !out[len(out)-1].At.Equal(at) || out[len(out)-1].Arm != arm {
				out = append(out, ArmBin{At: at, Arm: arm, Outcomes: map[string]int64{}})
			}
			out[len(out)-1].Outcomes[outcome] += n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("arm series of %s: %w", deployment, err)
	}
	return out, width, nil
}

// RolloutEvents returns deployment's rollout events in [since, until),
// oldest first, at most limit (the newest ones when there are more), and
// the last event before since (nil when none): the state the range
// starts in.
func (r *Reader) RolloutEvents(ctx context.Context, deployment string, since, until time.Time, limit int) ([]RolloutEvent, *RolloutEvent, error) {
	what := "rollout events of " + deployment
	in, err := queryRows(ctx, r, what, collectRollouts, `SELECT * FROM (SELECT `+rolloutColumns+` FROM rollout_events
		WHERE deployment = $1 AND occurred_at >= $2 AND occurred_at < $3
		ORDER BY stream_seq DESC, occurred_at DESC LIMIT $4) AS newest ORDER BY stream_seq, occurred_at`,
		deployment, since, until, limit)
	if err != nil {
		return nil, nil, err
	}
	before, err := queryRows(ctx, r, what, collectRollouts, `SELECT `+rolloutColumns+` FROM rollout_events
		WHERE deployment = $1 AND occurred_at < $2 ORDER BY stream_seq DESC, occurred_at DESC LIMIT 1`, deployment, since)
	if err != nil {
		return nil, nil, err
	}
	if len(before) == 0 {
		return in, nil, nil
	}
	return in, &before[0], nil
}

// serially runs f in a read-only transaction planned without JIT
// compilation or parallel workers. The series read one deployment's rows
// through its index, but the planner, which takes every jsonb function
// to yield 100 rows, estimates millions and would compile the query
// (about 400 ms, more than the whole scan: EXPLAIN ANALYZE in
// TestOverviewAtScale's seed) and start workers for it.
func (r *Reader) serially(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0`); err != nil {
			return err
		}
		return f(tx)
	})
}

// binWidth is the span that splits [since, until) into at most n bins,
// rounded up to a whole second.
func binWidth(since, until time.Time, n int) time.Duration {
	d := until.Sub(since)
	if n < 1 || d <= 0 {
		return time.Second
	}
	w := (d + time.Duration(n) - 1) / time.Duration(n)
	return max(w.Truncate(time.Second)+time.Second, time.Second)
}
