package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// What the analyzers say about the lease (SPEC §11 rev. 4). A family an
// analyzer does not export is recorded as absent, never as 0.
const (
	metricLeaseHeld   = "graygate_analyzer_lease_held"
	metricLeaseVacant = "graygate_analyzer_lease_vacant_seconds"
	readyzNoLease     = "no analyzer holds the lease"
)

// Held states of one analyzer in a lease sample.
const (
	heldUnknown = -1 // stopped by the drill, or no answer
	heldNo      = 0
	heldYes     = 1
)

// leaseSample is one look at every analyzer.
type leaseSample struct {
	at   time.Time
	held []int // per analyzer: heldYes, heldNo or heldUnknown
	// readyzNoLease: some analyzer answered /readyz 503 naming the vacancy.
	readyzNoLease bool
	// vacantMetric: the largest graygate_analyzer_lease_vacant_seconds of
	// the analyzers that export it; -1 when none does.
	vacantMetric float64
}

// leaseWatch looks at every analyzer's /metrics and /readyz every period.
type leaseWatch struct {
	analyzers []*analyzer
	client    *http.Client

	mu      sync.Mutex
	samples []leaseSample
}

func newLeaseWatch(as []*analyzer) *leaseWatch {
	return &leaseWatch{analyzers: as, client: &http.Client{Timeout: 500 * time.Millisecond}}
}

func (w *leaseWatch) run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		w.look(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// look takes one sample; a stopped analyzer counts as not acting (it
// cannot), one that does not answer as unknown.
func (w *leaseWatch) look(ctx context.Context) {
	s := leaseSample{at: time.Now(), held: make([]int, len(w.analyzers)), vacantMetric: -1}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, a := range w.analyzers {
		s.held[i] = heldUnknown
		if a.Stopped() || a.Pid() == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := w.metrics(ctx, a.url)
			code, body, rerr := w.get(ctx, a.url+"/readyz")
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				if v, ok := m[metricLeaseHeld]; ok {
					s.held[i] = heldNo
					if v == 1 {
						s.held[i] = heldYes
					}
				}
				if v, ok := m[metricLeaseVacant]; ok && v > s.vacantMetric {
					s.vacantMetric = v
				}
			}
			if rerr == nil && code == http.StatusServiceUnavailable && strings.Contains(body, readyzNoLease) {
				s.readyzNoLease = true
			}
		}()
	}
	wg.Wait()
	w.mu.Lock()
	w.samples = append(w.samples, s)
	w.mu.Unlock()
}

func (w *leaseWatch) get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}

// metrics reads the two lease families from an analyzer's /metrics.
func (w *leaseWatch) metrics(ctx context.Context, base string) (map[string]float64, error) {
	code, body, err := w.get(ctx, base+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d", code)
	}
	return parseMetrics(body, metricLeaseHeld, metricLeaseVacant), nil
}

// parseMetrics returns the value of each named family's first sample in
// Prometheus text; a family without a sample is absent from the map.
func parseMetrics(text string, names ...string) map[string]float64 {
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		for _, n := range names {
			if !strings.HasPrefix(line, n) || len(line) == len(n) || (line[len(n)] != ' ' && line[len(n)] != '{') {
				continue
			}
			if _, seen := m[n]; seen {
				continue
			}
			rest := line[len(n):]
			if i := strings.LastIndexByte(rest, '}'); i >= 0 {
				rest = rest[i+1:]
			}
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				continue
			}
			if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
				m[n] = v
			}
		}
	}
	return m
}

// between returns the samples taken in [from, to).
func (w *leaseWatch) between(from, to time.Time) []leaseSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []leaseSample
	for _, s := range w.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// holder returns the analyzer that held the lease at the last sample, -1
// when none did.
func (w *leaseWatch) holder() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == 0 {
		return -1
	}
	for i, h := range w.samples[len(w.samples)-1].held {
		if h == heldYes {
			return i
		}
	}
	return -1
}

// gatewayView is one gateway's rollout entry for the drill's deployment,
// as its admin API answered at a moment.
type gatewayView struct {
	at    time.Time
	gw    int
	entry events.RolloutEntry
}

// rolloutWatch polls every gateway's /admin/rollouts and records each
// change of the deployment's entry: every fast period while armed (a
// rollback is expected), every slow one otherwise.
type rolloutWatch struct {
	gws    []*gateway
	client *http.Client
	armed  atomic.Bool

	mu    sync.Mutex
	views []gatewayView
	last  []events.RolloutEntry
}

func newRolloutWatch(gws []*gateway) *rolloutWatch {
	return &rolloutWatch{gws: gws, client: &http.Client{Timeout: 2 * time.Second}, last: make([]events.RolloutEntry, len(gws))}
}

func (w *rolloutWatch) run(ctx context.Context, fast, slow time.Duration) {
	var wg sync.WaitGroup
	for i, g := range w.gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if e, err := rolloutOf(ctx, w.client, g.admin); err == nil {
					w.record(i, e)
				}
				d := slow
				if w.armed.Load() {
					d = fast
				}
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
		}()
	}
	wg.Wait()
}

func (w *rolloutWatch) record(i int, e events.RolloutEntry) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.last[i]
	if l.Revision == e.Revision && l.Status == e.Status && l.Percentage == e.Percentage && l.Known == e.Known {
		return
	}
	w.last[i] = e
	w.views = append(w.views, gatewayView{at: now, gw: i, entry: e})
}

// current returns every gateway's last entry.
func (w *rolloutWatch) current() []events.RolloutEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]events.RolloutEntry(nil), w.last...)
}

// allViews returns every recorded change.
func (w *rolloutWatch) allViews() []gatewayView {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]gatewayView(nil), w.views...)
}

// rolloutOf reads the drill's deployment from a gateway's admin API.
func rolloutOf(ctx context.Context, client *http.Client, admin string) (events.RolloutEntry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/admin/rollouts", nil)
	if err != nil {
		return events.RolloutEntry{}, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		return events.RolloutEntry{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Rollouts []events.RolloutEntry `json:"rollouts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return events.RolloutEntry{}, err
	}
	for _, r := range body.Rollouts {
		if r.Deployment == deployment {
			return r, nil
		}
	}
	return events.RolloutEntry{}, fmt.Errorf("no rollout for %s", deployment)
}
