package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/graygate/graygate/scripts/internal/paced"
)

// The drill's traffic: one request in violationEvery breaks the sampling
// contract (a 400 the gateway must answer itself and record as a
// rejection); one in streamEvery streams; the rest are plain completions.
const (
	violationEvery = 20
	streamEvery    = 8
)

// outcome is what the client saw of one request.
type outcome struct {
	status    int    // HTTP status; 0 when no answer arrived
	arm       string // x-gateway-arm
	violation bool   // the request broke the sampling contract on purpose
}

// phaseStats are the client's figures for one phase.
type phaseStats struct {
	name      string
	statuses  map[int]int
	arms      map[string]int
	errors    int      // client-visible errors: transport failures, unexpected statuses, stream error events
	examples  []string // the first few errors
	rerouted  int      // requests that found their replica gone and went to the other one
	latencies []float64
}

func newPhaseStats(name string) *phaseStats {
	return &phaseStats{name: name, statuses: map[int]int{}, arms: map[string]int{}}
}

func (p *phaseStats) requests() int { return len(p.latencies) }

// load sends the drill's traffic to the gateway replicas at a fixed rate,
// round robin, skipping replicas taken out of the balancer; a request whose
// replica refuses the connection goes to the other one, as a load balancer
// does (the request never reached a gateway, so this retry cannot duplicate).
type load struct {
	gws    []*gateway
	out    []atomic.Bool // replica i is out of the balancer
	client *http.Client
	pace   paced.Runner // numbers the requests; counts the ticks dropped because every worker was busy

	mu    sync.Mutex
	phase *phaseStats
	sent  map[string]outcome // by x-request-id
}

func newLoad(gws []*gateway, conns int) *load {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: 30 * time.Second}
	return &load{
		gws: gws, out: make([]atomic.Bool, len(gws)),
		client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		sent:   map[string]outcome{},
	}
}

// setPhase starts counting into a new phase's figures and returns the old.
func (l *load) setPhase(p *phaseStats) *phaseStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.phase
	l.phase = p
	return old
}

// run sends rate requests per second with conns workers until ctx ends,
// then waits for the requests in flight.
func (l *load) run(ctx context.Context, rate, conns, users int) {
	l.pace.Run(ctx, rate, conns, func(n int64) { l.one(n, users) })
}

// one sends request n and records what came back.
func (l *load) one(n int64, users int) {
	id := "soak-" + strconv.FormatInt(n, 10)
	user := "user-" + strconv.FormatInt(n%int64(users), 10)
	var body string
	violation, stream := n%violationEvery == 0, n%streamEvery == 1
	switch {
	case violation:
		body = `{"model":"agent-chat","user":"` + user + `","temperature":5,"messages":[{"role":"user","content":"soak"}]}`
	case stream:
		body = `{"model":"agent-chat","user":"` + user + `","stream":true,"messages":[{"role":"user","content":"What should the agent do next?"}]}`
	default:
		body = `{"model":"agent-chat","user":"` + user + `","messages":[{"role":"user","content":"What should the agent do next?"}]}`
	}
	start := time.Now()
	o, rerouted, err := l.send(int(n), id, body, stream)
	o.violation = violation
	ms := float64(time.Since(start).Microseconds()) / 1000
	if err == nil {
		switch {
		case violation && o.status != http.StatusBadRequest:
			err = fmt.Errorf("a contract violation got %d, want 400", o.status)
		case !violation && o.status != http.StatusOK:
			err = fmt.Errorf("status %d", o.status)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.phase
	p.latencies = append(p.latencies, ms)
	if rerouted {
		p.rerouted++
	}
	if o.status != 0 {
		p.statuses[o.status]++
		l.sent[id] = o
	}
	if o.arm != "" {
		p.arms[o.arm]++
	}
	if err != nil {
		p.errors++
		if len(p.examples) < 5 {
			p.examples = append(p.examples, id+": "+err.Error())
		}
	}
}

// send posts body to a replica chosen round robin, rerouting once when the
// replica refuses the connection.
func (l *load) send(n int, id, body string, stream bool) (outcome, bool, error) {
	first := n % len(l.gws)
	for try := range len(l.gws) {
		i := (first + try) % len(l.gws)
		if l.out[i].Load() && try < len(l.gws)-1 {
			continue
		}
		o, err := l.post(l.gws[i].url, id, body, stream)
		if err != nil && o.status == 0 && errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		return o, try > 0, err
	}
	return outcome{}, true, errors.New("every gateway replica refused the connection")
}

func (l *load) post(url, id, body string, stream bool) (outcome, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return outcome{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	// Lets net/http resend the request when a reused keep-alive connection
	// turns out closed before anything was answered (a replica shutting
	// down closes its idle connections).
	req.Header.Set("Idempotency-Key", id)
	resp, err := l.client.Do(req)
	if err != nil {
		return outcome{}, err
	}
	defer resp.Body.Close()
	o := outcome{status: resp.StatusCode, arm: resp.Header.Get("x-gateway-arm")}
	if !stream || resp.StatusCode != http.StatusOK {
		_, err = io.Copy(io.Discard, resp.Body)
		return o, err
	}
	return o, readStream(resp.Body)
}

// readStream reads an SSE answer to its end: it must finish with
// `data: [DONE]` and carry no error event.
func readStream(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte(`data: {"error"`)):
			return fmt.Errorf("stream error event: %.200s", line)
		case bytes.Equal(line, []byte("data: [DONE]")):
			done = true
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream cut: %w", err)
	}
	if !done {
		return errors.New("stream ended without data: [DONE]")
	}
	return nil
}

// outcomes returns a copy of every answered request's outcome.
func (l *load) outcomes() map[string]outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]outcome, len(l.sent))
	for k, v := range l.sent {
		m[k] = v
	}
	return m
}

// snapshot returns the current phase's request and error counts.
func (l *load) snapshot() (requests, errs int, arms map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	arms = map[string]int{}
	for k, v := range l.phase.arms {
		arms[k] = v
	}
	return l.phase.requests(), l.phase.errors, arms
}
