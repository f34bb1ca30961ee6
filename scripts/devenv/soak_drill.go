package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/internal/counts"
	"github.com/graygate/graygate/scripts/internal/mockllm"
)

// fault is what one phase does to the system while the traffic runs.
type fault struct {
	name     string
	what     string // one line for the progress and the report
	rollback bool   // the analyzer must roll the gray arm back in this phase
	// act breaks a part; the returned function restores it (nil: nothing
	// to restore).
	act func(ctx context.Context, s *system) (restore func(context.Context) error, err error)
}

func (s *system) faults() []fault {
	killProc := func(p *proc) func(context.Context, *system) (func(context.Context) error, error) {
		return func(context.Context, *system) (func(context.Context) error, error) {
			p.Kill()
			return p.Start, nil
		}
	}
	natsFault := fault{name: "nats", what: "nats-server SIGKILLed, restarted", act: killProc(s.nats[0])}
	if len(s.nats) > 1 {
		natsFault.what = fmt.Sprintf("one of %d NATS servers (R%d streams) SIGKILLed, restarted", len(s.nats), len(s.nats))
	}
	return []fault{
		{name: "steady", what: "nothing is broken"},
		natsFault,
		{name: "postgres", what: "Postgres crashed (pg_ctl stop -m immediate), restarted",
			act: func(ctx context.Context, s *system) (func(context.Context) error, error) {
				if err := s.pg.stop(ctx, "immediate"); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { return s.pg.start(ctx, s.pgPort) }, nil
			}},
		{name: "collector", what: "collector SIGKILLed, restarted", act: killProc(s.coll)},
		{name: "analyzer", what: "analyzer SIGKILLed, restarted", act: killProc(s.analyzer)},
		{name: "gateway", what: "gateway-2 SIGTERMed under load, restarted",
			act: func(ctx context.Context, s *system) (func(context.Context) error, error) {
				g := s.gateways[1]
				s.load.out[1].Store(true) // the balancer stops sending new requests to it
				g.Terminate()
				return func(ctx context.Context) error {
					if err := g.Start(ctx); err != nil {
						return err
					}
					s.load.out[1].Store(false)
					return nil
				}, nil
			}},
		{name: "rollback", what: "the gray upstream breaks its schema; the analyzer must roll it back", rollback: true,
			act: func(ctx context.Context, s *system) (func(context.Context) error, error) {
				s.grayBroken.Store(time.Now().UnixNano())
				return nil, s.mockConfig(ctx, `{"content":"schema-break"}`)
			}},
	}
}

// drill runs the phases under steady traffic, lets the pipeline settle and
// gathers the report.
func (s *system) drill(ctx context.Context) (*soakReport, error) {
	faults := s.faults()
	s.load = newLoad(s.gateways, s.o.conns)
	s.load.setPhase(newPhaseStats("start"))
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { s.load.run(loadCtx, s.o.rate, s.o.conns, s.o.users); close(loadDone) }()
	defer func() { stopLoad(); <-loadDone }()

	total := time.Duration(len(faults)) * s.o.phase
	logf("soak: %d phases of %s at %d req/s over %d connections (about %s); each fault lasts %s",
		len(faults), s.o.phase, s.o.rate, s.o.conns, total.Round(time.Second), s.o.outage)
	rep := &soakReport{Options: s.o.summary(), Started: time.Now().UTC()}
	var rolloutWatch sync.WaitGroup
	for i, f := range faults {
		stats := newPhaseStats(f.name)
		s.load.setPhase(stats)
		ph := phaseReport{Name: f.name, What: f.what, Start: time.Now()}
		logf("soak: phase %d/%d %s: %s", i+1, len(faults), f.name, f.what)
		faultAt := min(2*time.Second, s.o.phase/4)
		var restore func(context.Context) error
		if f.rollback {
			rolloutWatch.Add(1)
			go func() { defer rolloutWatch.Done(); rep.RollbackMillis = s.watchRollback(ctx, s.o.phase) }()
		}
		deadline := ph.Start.Add(s.o.phase)
		acted, restored := false, f.act == nil
		lastProgress := time.Now()
		for time.Now().Before(deadline) {
			el := time.Since(ph.Start)
			if !acted && el >= faultAt && f.act != nil {
				acted = true
				r, err := f.act(ctx, s)
				if err != nil {
					return nil, fmt.Errorf("phase %s: %w", f.name, err)
				}
				restore, restored = r, r == nil
				ph.FaultAt = el.Round(time.Millisecond).String()
				logf("soak:   %s: fault applied", f.name)
			}
			if acted && !restored && el >= faultAt+s.o.outage {
				restored = true
				t := time.Now()
				if err := restore(ctx); err != nil {
					return nil, fmt.Errorf("phase %s: restore: %w", f.name, err)
				}
				ph.RestoredAt = time.Since(ph.Start).Round(time.Millisecond).String()
				logf("soak:   %s: restored in %s", f.name, time.Since(t).Round(time.Millisecond))
			}
			if time.Since(lastProgress) >= 5*time.Second {
				lastProgress = time.Now()
				n, errs, arms := s.load.snapshot()
				logf("soak:   %s %3.0fs/%.0fs: %d requests, %d client errors, arms %s",
					f.name, el.Seconds(), s.o.phase.Seconds(), n, errs, counts.Format(arms))
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !restored {
			if err := restore(ctx); err != nil {
				return nil, fmt.Errorf("phase %s: restore: %w", f.name, err)
			}
		}
		if f.rollback {
			rep.RollbacksExpected++
		}
		ph.Seconds = time.Since(ph.Start).Seconds()
		rep.Phases = append(rep.Phases, ph)
		s.phaseStats = append(s.phaseStats, stats)
	}
	stopLoad()
	<-loadDone
	rolloutWatch.Wait()
	rep.Behind = s.load.pace.Behind()
	for i, st := range s.phaseStats {
		rep.Phases[i].fill(st)
	}
	if err := s.settle(ctx, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// watchRollback polls every gateway's rollout state from the moment the
// gray arm breaks until all serve it at 0 %, and returns how long that
// took in milliseconds (-1 when it did not happen within limit).
func (s *system) watchRollback(ctx context.Context, limit time.Duration) float64 {
	for s.grayBroken.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	broken := time.Unix(0, s.grayBroken.Load())
	client := &http.Client{Timeout: time.Second}
	deadline := broken.Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		all := true
		for _, g := range s.gateways {
			p, status, err := rolloutOf(client, g.admin, "qwen")
			all = all && err == nil && p == 0 && status == events.StatusRolledBack
		}
		if all {
			return float64(time.Since(broken).Microseconds()) / 1000
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// rolloutOf reads a deployment's rollout from a gateway's admin API.
func rolloutOf(client *http.Client, admin, deployment string) (float64, events.RolloutStatus, error) {
	req, _ := http.NewRequest(http.MethodGet, admin+"/admin/rollouts", nil)
	req.Header.Set("Authorization", "Bearer soak-admin-token")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var body struct {
		Rollouts []events.RolloutEntry `json:"rollouts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, "", err
	}
	for _, r := range body.Rollouts {
		if r.Deployment == deployment {
			return r.Percentage, r.Status, nil
		}
	}
	return 0, "", fmt.Errorf("no rollout for %s", deployment)
}

// mockConfig changes the gray mock's live behaviour.
func (s *system) mockConfig(ctx context.Context, settings string) error {
	if err := mockllm.Configure(ctx, s.mockURL[1], settings); err != nil {
		return fmt.Errorf("gray mock: %w", err)
	}
	return nil
}

// settleTimeout bounds the wait for the pipeline to store what was sent.
// settleStall ends it early when no row arrived for that long: longer
// than the collector's AckWait (1 minute), after which JetStream
// redelivers what a killed collector had received but not stored.
const (
	settleTimeout = 3 * time.Minute
	settleStall   = 75 * time.Second
)

// rejected reports whether the gateway refused the request for its
// contract violation: a request.rejected event, not a request.completed.
func (o outcome) rejected() bool { return o.violation && o.status == http.StatusBadRequest }

// settle waits until Postgres holds a row for every answered request (or
// settleTimeout passes), then compares what the client saw with what was
// stored.
func (s *system) settle(ctx context.Context, rep *soakReport) error {
	sent := s.load.outcomes()
	var want stored
	for _, o := range sent {
		if o.rejected() {
			want.Rejections++
			continue
		}
		want.Requests++
		if events.Arm(o.arm) == events.ArmFallback {
			want.Samples++
		}
	}
	logf("soak: traffic stopped; waiting for the pipeline to store %d request, %d rejection and %d sample events",
		want.Requests, want.Rejections, want.Samples)
	start, progress := time.Now(), time.Now()
	var got, last stored
	for {
		var err error
		got, err = s.count(ctx)
		if err != nil {
			logf("soak:   count rows: %v", err)
		} else if got.Requests >= want.Requests && got.Rejections >= want.Rejections && got.Samples >= want.Samples {
			break
		}
		if got != last || time.Since(progress)%(10*time.Second) < time.Second {
			logf("soak:   stored %d/%d requests, %d/%d rejections, %d/%d samples",
				got.Requests, want.Requests, got.Rejections, want.Rejections, got.Samples, want.Samples)
		}
		if got != last {
			last, progress = got, time.Now()
		}
		if time.Since(start) > settleTimeout || time.Since(progress) > settleStall {
			logf("soak:   gave up waiting after %s (no new row for %s)", time.Since(start).Round(time.Second), time.Since(progress).Round(time.Second))
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	rep.SettleSeconds = time.Since(start).Seconds()
	missing, err := s.missing(ctx, sent)
	if err != nil {
		return err
	}
	rep.Events = eventsReport{Expected: want, Stored: got, Missing: len(missing), MissingExamples: firstN(missing, 5)}
	rollbacks, err := s.rollbacks(ctx, rep.Phases)
	if err != nil {
		return err
	}
	rep.RollbacksSeen = rollbacks
	return nil
}

// stored counts the rows the drill cares about.
type stored struct {
	Requests   int `json:"requests"`
	Rejections int `json:"rejections"`
	Samples    int `json:"samples"`
	// Duplicates: rows beyond the first for one request id (or event id).
	Duplicates int `json:"duplicates"`
}

func (s *system) count(ctx context.Context) (stored, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.db)
	if err != nil {
		return stored{}, err
	}
	defer conn.Close(ctx)
	var st stored
	var dr, drj, ds, de int
	err = conn.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM requests WHERE request_id LIKE 'soak-%'),
		       (SELECT count(*) - count(DISTINCT request_id) FROM requests WHERE request_id LIKE 'soak-%'),
		       (SELECT count(*) FROM rejections WHERE request_id LIKE 'soak-%'),
		       (SELECT count(*) - count(DISTINCT request_id) FROM rejections WHERE request_id LIKE 'soak-%'),
		       (SELECT count(*) FROM samples WHERE request_id LIKE 'soak-%'),
		       (SELECT count(*) - count(DISTINCT request_id) FROM samples WHERE request_id LIKE 'soak-%'),
		       (SELECT count(*) - count(DISTINCT event_id) FROM (
		            SELECT event_id FROM requests UNION ALL SELECT event_id FROM rejections
		            UNION ALL SELECT event_id FROM samples) e)`).
		Scan(&st.Requests, &dr, &st.Rejections, &drj, &st.Samples, &ds, &de)
	if err != nil {
		return stored{}, err
	}
	st.Duplicates = dr + drj + ds + de
	return st, nil
}

// missing lists the answered requests with no row: a contract rejection
// needs a rejection row, every other answer a request row.
func (s *system) missing(ctx context.Context, sent map[string]outcome) ([]string, error) {
	conn, err := pgx.Connect(ctx, s.db)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	have := map[string]bool{}
	for _, q := range []string{
		"SELECT request_id FROM requests WHERE request_id LIKE 'soak-%'",
		"SELECT 'rej:' || request_id FROM rejections WHERE request_id LIKE 'soak-%'",
	} {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			have[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var out []string
	for id, o := range sent {
		switch {
		case o.rejected() && !have["rej:"+id]:
			out = append(out, id+" (rejection)")
		case !o.rejected() && !have[id]:
			out = append(out, id+" (request)")
		}
	}
	sort.Strings(out)
	return out, nil
}

// rollbacks counts the stored rollbacks of each phase.
func (s *system) rollbacks(ctx context.Context, phases []phaseReport) (int, error) {
	conn, err := pgx.Connect(ctx, s.db)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT occurred_at, actor, reason FROM rollout_events WHERE status = 'rolled_back' ORDER BY occurred_at`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var at time.Time
		var actor, reason string
		if err := rows.Scan(&at, &actor, &reason); err != nil {
			return 0, err
		}
		n++
		for i := range phases {
			end := phases[i].Start.Add(time.Duration(phases[i].Seconds * float64(time.Second)))
			if !at.Before(phases[i].Start) && (at.Before(end) || i == len(phases)-1) {
				phases[i].Rollbacks++
				phases[i].RollbackReasons = append(phases[i].RollbackReasons, actor+": "+reason)
			}
		}
	}
	return n, rows.Err()
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
