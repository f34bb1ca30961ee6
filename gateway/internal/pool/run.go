package pool

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/graygate/graygate/gateway/internal/pool/discovery"
	"github.com/graygate/graygate/gateway/internal/pool/engine"
	"github.com/graygate/graygate/gateway/internal/upstream"
)

// shareBlocks bounds the index entries a gateway keeps to publish with
// prefix.share between two publications.
const shareBlocks = 4096

// Start resolves a discovery pool's first member set (waiting at most
// its refresh interval; a pool that finds none yet starts empty and
// fills on the next success) and starts the pool's upkeep, discovery,
// health checks and engine scrapes, until ctx ends. A single url only
// gets its upkeep.
func (p *Pool) Start(ctx context.Context, wg *sync.WaitGroup) error {
	if err := p.httpClient(); err != nil {
		return err
	}
	loops := []func(context.Context){p.runUpkeep}
	if g := p.cfg.Discovery; g != nil {
		d, err := discovery.New(discovery.Options{
			Name: g.DNS, Port: g.Port, Scheme: g.Scheme, Refresh: g.Refresh, Resolver: p.dns, Log: p.log,
			OnChange: func(members []string) {
				if err := p.SetMembers(members); err != nil {
					p.log.Warn("discovered replicas refused", "deployment", p.Deployment, "arm", p.Arm, "err", err)
				}
			},
			OnError: func(error) { p.m.discoveryError() },
		})
		if err != nil {
			return err
		}
		first, cancel := context.WithTimeout(ctx, g.Refresh)
		_, _ = d.Resolve(first) // OnChange fills the pool; a failure is logged and counted
		cancel()
		loops = append(loops, func(ctx context.Context) { _ = d.Run(ctx) })
	}
	if !p.single && p.cfg.Health != nil {
		loops = append(loops, p.runHealth)
	}
	if !p.single && p.cfg.EngineMetrics != nil {
		loops = append(loops, p.runScrapes)
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	return nil
}

// httpClient makes the client of health checks and scrapes, with the
// upstream's TLS settings.
func (p *Pool) httpClient() error {
	tr := &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute, ResponseHeaderTimeout: 10 * time.Second}
	if t := p.cfg.TLS; t.CAFile != "" || t.CertFile != "" || t.ServerName != "" || t.InsecureSkipVerify {
		tc, err := upstream.TLSConfig(t.ServerName, t)
		if err != nil {
			return err
		}
		tr.TLSClientConfig = tc
	}
	p.http = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return nil
}

// every calls f every interval, with up to a tenth of it as jitter so
// that gateways started together do not check in step, until ctx ends.
func every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	for {
		wait := interval + time.Duration(rand.Int64N(int64(interval)/10+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		f(ctx)
	}
}

// runHealth checks every replica every health.interval: GET
// {replica}{path} within health.timeout. unhealthy_after failed checks
// make it unhealthy, healthy_after passing ones healthy again.
func (p *Pool) runHealth(ctx context.Context) {
	h := p.cfg.Health
	every(ctx, h.Interval, func(ctx context.Context) {
		members := p.Members()
		results := make([]error, len(members))
		var wg sync.WaitGroup
		for i, r := range members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = p.check(ctx, r.root+h.Path, h.Timeout)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		changed := false
		for i, r := range members {
			if (results[i] != nil) != r.unhealthy {
				r.checks++
			} else {
				r.checks = 0
			}
			switch {
			case !r.unhealthy && r.checks >= h.UnhealthyAfter:
				r.unhealthy, r.checks, r.lastError = true, 0, "health check: "+results[i].Error()
				p.log.Warn("replica unhealthy", "deployment", p.Deployment, "arm", p.Arm, "replica", r.Name, "err", results[i])
			case r.unhealthy && r.checks >= h.HealthyAfter:
				r.unhealthy, r.checks = false, 0
				p.log.Info("replica healthy again", "deployment", p.Deployment, "arm", p.Arm, "replica", r.Name)
			default:
				continue
			}
			was := r.state
			r.refreshState(time.Now())
			changed = changed || was != r.state
		}
		if changed {
			p.publishLocked()
		}
	})
}

// check GETs url and wants a 2xx within timeout.
func (p *Pool) check(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ status int }

func (e *statusError) Error() string { return "answered " + strconv.Itoa(e.status) }

// runScrapes reads every replica's engine gauges every
// engine_metrics.interval; a failed scrape keeps the last gauges, which
// stop counting once older than three intervals.
func (p *Pool) runScrapes(ctx context.Context) {
	em := p.cfg.EngineMetrics
	every(ctx, em.Interval, func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, r := range p.Members() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, cancel := context.WithTimeout(ctx, em.Interval)
				defer cancel()
				g, err := engine.Scrape(sctx, p.http, r.root+em.Path)
				if err != nil {
					if ctx.Err() == nil {
						p.m.scrapeError()
					}
					return
				}
				r.engine.Store(&g)
			}()
		}
		wg.Wait()
	})
}
