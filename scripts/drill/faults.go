package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/internal/counts"
	"github.com/graygate/graygate/scripts/internal/mockllm"
)

// fault is one thing the drill breaks; inject breaks it and returns what
// heals it.
type fault struct {
	name, what string
	// outage is how long the fault lasts; 0: --outage.
	outage time.Duration
	// inject breaks it and returns what heals it; it may say in p.What
	// which part it chose.
	inject func(ctx context.Context, p *phase) (heal func(context.Context) error, err error)
}

// faults lists the drill's faults in the order they run.
func (s *system) faults(lw *leaseWatch) []fault {
	var fs []fault
	for _, nd := range s.cluster.nodes {
		fs = append(fs, fault{name: "sigstop-" + nd.Name, what: nd.Name + " SIGSTOPped, then SIGCONT",
			inject: func(context.Context, *phase) (func(context.Context) error, error) {
				if err := nd.Stop(); err != nil {
					return nil, err
				}
				return func(context.Context) error { return nd.Cont() }, nil
			}})
	}
	for _, nd := range s.cluster.nodes {
		fs = append(fs, fault{name: "sigkill-" + nd.Name, what: nd.Name + " SIGKILLed, then restarted",
			inject: func(context.Context, *phase) (func(context.Context) error, error) {
				nd.Kill()
				return nd.Start, nil
			}})
	}
	fs = append(fs, fault{name: "sigstop-lease-holder", what: "the analyzer holding the lease SIGSTOPped, then SIGCONT",
		inject: func(ctx context.Context, p *phase) (func(context.Context) error, error) {
			i := -1
			for end := time.Now().Add(15 * time.Second); i < 0 && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				i = lw.holder()
			}
			if i < 0 {
				return nil, fmt.Errorf("no analyzer holds the lease")
			}
			a := s.analyzers[i]
			logf("  the lease holder is %s", a.Name)
			p.What = a.Name + ", holding the lease, SIGSTOPped, then SIGCONT"
			if err := a.Stop(); err != nil {
				return nil, err
			}
			return func(context.Context) error { return a.Cont() }, nil
		}})
	fs = append(fs, fault{name: "partition", what: "the node leading " + events.StreamRollout + " cut off from the other two (route proxies), then healed",
		inject: func(ctx context.Context, p *phase) (func(context.Context) error, error) {
			n := s.cluster.leaderOf(ctx, events.StreamRollout)
			logf("  partitioning nats-%d", n)
			p.What = fmt.Sprintf("nats-%d, leading %s, cut off from the other two (route proxies), then healed", n, events.StreamRollout)
			s.cluster.partition(n, true)
			return func(context.Context) error { s.cluster.partition(n, false); return nil }, nil
		}})
	// No analyzer can renew the lease without a quorum: this vacancy
	// outlasts 2 × lease_ttl, which the analyzers must report.
	fs = append(fs, fault{name: "quorum-loss", what: "nats-2 and nats-3 SIGKILLed (no quorum), then restarted", outage: s.o.longOutage,
		inject: func(context.Context, *phase) (func(context.Context) error, error) {
			two := s.cluster.nodes[1:]
			for _, nd := range two {
				nd.Kill()
			}
			return func(ctx context.Context) error {
				for _, nd := range two {
					if err := nd.Start(ctx); err != nil {
						return err
					}
				}
				return nil
			}, nil
		}})
	return fs
}

// selectFaults keeps the faults named in only (all when empty).
func selectFaults(fs []fault, only []string) ([]fault, error) {
	if len(only) == 0 {
		return fs, nil
	}
	var out []fault
	var names []string
	for _, f := range fs {
		names = append(names, f.name)
		if slices.Contains(only, f.name) {
			out = append(out, f)
		}
	}
	if len(out) != len(only) {
		return nil, fmt.Errorf("--faults %s: the faults are %s", strings.Join(only, ","), strings.Join(names, ", "))
	}
	return out, nil
}

// leaderOf asks the nodes' monitoring which node leads stream, 1 when
// none says.
func (c *cluster) leaderOf(ctx context.Context, stream string) int {
	client := &http.Client{Timeout: 2 * time.Second}
	for _, nd := range c.nodes {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.monitor+"/jsz?accounts=true&streams=true", nil)
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		var body struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, a := range body.Accounts {
			for _, st := range a.Streams {
				for _, n := range c.nodes {
					if st.Name == stream && st.Cluster.Leader == fmt.Sprintf("graygate-drill-%d", n.n) {
						return n.n
					}
				}
			}
		}
	}
	return 1
}

// runPhase runs fault f as phase i under the running traffic: the gray
// back at 20 % and healthy, the fault, the gray breaking while it lasts,
// the heal, and the wait for the rollback on every gateway.
func (s *system) runPhase(ctx context.Context, i int, f fault, l *load, rw *rolloutWatch, lw *leaseWatch) (phase, error) {
	o := s.o
	outage := o.outage
	if f.outage > 0 {
		outage = f.outage
	}
	p := phase{Name: f.name, What: f.what, Start: time.Now()}
	l.phase.Store(int64(i))
	logf("phase %d %s: %s", i+1, f.name, f.what)
	if err := s.mockConfig(ctx, `{"content":null}`); err != nil {
		return p, err
	}
	if err := s.resume(ctx, rw, f.name); err != nil {
		return p, err
	}
	sleep(ctx, o.steady)

	p.Inject = time.Now()
	heal, err := f.inject(ctx, &p)
	if err != nil {
		return p, fmt.Errorf("%s: %w", f.name, err)
	}
	logf("  fault injected")
	healed := false
	defer func() {
		if !healed && heal != nil {
			_ = heal(context.WithoutCancel(ctx))
		}
	}()
	var healthy chan time.Time
	last := time.Now()
	progress := func() {
		if time.Since(last) < 5*time.Second {
			return
		}
		last = time.Now()
		n, errs, arms := l.since(i)
		var gws []string
		for k, e := range rw.current() {
			gws = append(gws, fmt.Sprintf("gateway-%d %s %.0f%% rev %d", k+1, e.Status, e.Percentage, e.Revision))
		}
		holder := "none"
		if h := lw.holder(); h >= 0 {
			holder = s.analyzers[h].Name
		}
		logf("  %s %3.0fs: %d requests, %d client errors, arms %s; lease %s; %s",
			f.name, time.Since(p.Start).Seconds(), n, errs, counts.Format(arms), holder, strings.Join(gws, ", "))
	}
	for ctx.Err() == nil {
		el := time.Since(p.Inject)
		if p.Break.IsZero() && el >= o.breakAfter {
			if err := s.mockConfig(ctx, `{"content":"schema-break"}`); err != nil {
				return p, err
			}
			p.Break = time.Now()
			rw.armed.Store(true)
			logf("  the gray upstream breaks its schema")
		}
		if !healed && el >= outage {
			healed = true
			if err := heal(ctx); err != nil {
				return p, fmt.Errorf("%s: heal: %w", f.name, err)
			}
			p.Heal = time.Now()
			logf("  fault healed after %s", p.Heal.Sub(p.Inject).Round(time.Millisecond))
			// From the heal on, watch for every node's /healthz 200 (at
			// most 90 s); the phase ends after it.
			healthy = make(chan time.Time, 1)
			go func() {
				if err := s.cluster.healthy(ctx, 90*time.Second); err != nil {
					logf("  %v; going on", err)
					healthy <- time.Time{}
					return
				}
				healthy <- time.Now()
			}()
		}
		if healed {
			rolled := allRolledBack(rw.current())
			if rolled && time.Since(p.Heal) >= o.settle {
				break
			}
			if time.Since(p.Heal) >= o.limit {
				logf("  no rollback on every gateway %s after the heal; going on", o.limit)
				break
			}
		}
		progress()
		sleep(ctx, 100*time.Millisecond)
	}
	rw.armed.Store(false)
	if healthy != nil {
		if h := <-healthy; !h.IsZero() {
			p.Healthy = h
			logf("  every node healthy %s after the heal", p.Healthy.Sub(p.Heal).Round(100*time.Millisecond))
		}
	}
	p.End = time.Now()
	return p, ctx.Err()
}

// allRolledBack reports whether every gateway serves the deployment at 0 %
// after a rollback.
func allRolledBack(es []events.RolloutEntry) bool {
	for _, e := range es {
		if e.Status != events.StatusRolledBack || e.Percentage != 0 {
			return false
		}
	}
	return len(es) > 0
}

// resume puts the gray back at 20 % when a gateway shows it otherwise (an
// operator's change through the admin API, retried while the event log
// refuses it), and waits until every gateway serves it.
func (s *system) resume(ctx context.Context, rw *rolloutWatch, name string) error {
	// known: every gateway has read the log (a gateway that has not
	// serves primary only and refuses changes); active: all serve 20 %.
	state := func() (known, active bool) {
		es := rw.current()
		known, active = len(es) > 0, len(es) > 0
		for _, e := range es {
			known = known && e.Known
			active = active && e.Known && e.Status == events.StatusActive && e.Percentage == 20
		}
		return known, active
	}
	active := func() bool { _, a := state(); return a }
	deadline := time.Now().Add(90 * time.Second)
	body := `{"status":"active","percentage":20,"reason":"drill: gray back at 20 % before ` + name + `"}`
	var lastPut time.Time
	puts := 0
	for !active() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the gray is not back at 20 %% on every gateway after 90s: %+v", rw.current())
		}
		if known, _ := state(); known && time.Since(lastPut) >= 2*time.Second {
			lastPut = time.Now()
			g := s.gateways[puts%len(s.gateways)]
			puts++
			code, text, err := s.admin(ctx, http.MethodPut, g.admin+"/admin/rollouts/"+deployment, body)
			if err != nil || code != http.StatusOK {
				logf("  resume through %s: %d %v %.200s", g.Name, code, err, text)
			}
		}
		sleep(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (s *system) admin(ctx context.Context, method, url, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), nil
}

// mockConfig changes the gray mock's live behaviour.
func (s *system) mockConfig(ctx context.Context, settings string) error {
	if err := mockllm.Configure(ctx, s.mockURL[1], settings); err != nil {
		return fmt.Errorf("gray mock: %w", err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
