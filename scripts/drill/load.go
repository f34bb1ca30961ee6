package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/scripts/internal/paced"
)

// violationEvery: one request in this many breaks the sampling contract
// (a 400 the gateway answers itself and records as a rejection event).
const violationEvery = 20

// request is what the client saw of one request.
type request struct {
	id        string
	phase     int // index of the phase it was sent in
	sent      time.Time
	answered  time.Time
	status    int    // 0: no answer
	arm       string // x-gateway-arm
	violation bool
	err       string // a client-visible error; "" when the answer was the expected one
}

// load sends the drill's traffic: rate requests a second over conns
// connections, round robin over the gateways, on loopback only.
type load struct {
	gws    []*gateway
	client *http.Client
	phase  atomic.Int64
	pace   paced.Runner // numbers the requests; counts the ticks dropped because every connection was busy

	mu   sync.Mutex
	reqs []request
}

func newLoad(gws []*gateway, conns int) *load {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: 30 * time.Second}
	return &load{gws: gws, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// run sends until ctx ends, then waits for the requests in flight.
func (l *load) run(ctx context.Context, rate, conns, users int) {
	l.pace.Run(ctx, rate, conns, func(n int64) { l.one(n, users) })
}

// one sends request n and records what came back.
func (l *load) one(n int64, users int) {
	r := request{id: "drill-" + strconv.FormatInt(n, 10), phase: int(l.phase.Load()), sent: time.Now()}
	user := "user-" + strconv.FormatInt(n%int64(users), 10)
	r.violation = n%violationEvery == 0
	temp := ""
	if r.violation {
		temp = `"temperature":5,`
	}
	body := `{"model":"agent-chat","user":"` + user + `",` + temp + `"messages":[{"role":"user","content":"What should the agent do next?"}]}`
	g := l.gws[int(n)%len(l.gws)]
	req, err := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		r.err = err.Error()
		l.add(r)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", r.id)
	resp, err := l.client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.status, r.arm = resp.StatusCode, resp.Header.Get("x-gateway-arm")
	}
	r.answered = time.Now()
	switch {
	case err != nil:
		r.err = err.Error()
	case r.violation && r.status != http.StatusBadRequest:
		r.err = fmt.Sprintf("a contract violation got %d, want 400", r.status)
	case !r.violation && r.status != http.StatusOK:
		r.err = fmt.Sprintf("status %d", r.status)
	}
	l.add(r)
}

func (l *load) add(r request) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

// requests returns a copy of every request sent so far.
func (l *load) requests() []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]request(nil), l.reqs...)
}

// since counts the requests, errors and answers per arm of phase i.
func (l *load) since(i int) (n, errs int, arms map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	arms = map[string]int{}
	for k := len(l.reqs) - 1; k >= 0 && l.reqs[k].phase >= i; k-- {
		r := l.reqs[k]
		if r.phase != i {
			continue
		}
		n++
		if r.err != "" {
			errs++
		}
		if r.arm != "" {
			arms[r.arm]++
		}
	}
	return n, errs, arms
}
