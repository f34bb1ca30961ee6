package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/google/pprof/profile"
)

// Profile is the --profile result: where the CPU per request of the bare
// fiber pass-through and of gw-s12 goes at Conns connections.
type Profile struct {
	Conns     int     `json:"conns"`
	DurationS float64 `json:"duration_s"`
	// Components are the breakdown's rows, in the order stacks are tried.
	Components []string         `json:"components"`
	Targets    []ProfiledTarget `json:"targets"`
}

// ProfiledTarget is one process's profile: the load it served, its CPU
// per request measured from /proc over the profile's window, and that
// figure divided among the components. SampledUSPerReq is the CPU the
// profile's samples hold, per request: close to CPUUSPerReq when the
// profile saw all of the process's CPU. Error says why there is no
// breakdown.
type ProfiledTarget struct {
	Target          string          `json:"target"`
	File            string          `json:"file,omitempty"`
	Requests        int64           `json:"requests"`
	RPS             float64         `json:"rps"`
	CPUUSPerReq     float64         `json:"cpu_us_per_req"`
	SampledUSPerReq float64         `json:"sampled_cpu_us_per_req"`
	Components      []ComponentCost `json:"components,omitempty"`
	Error           string          `json:"error,omitempty"`
}

// ComponentCost is one component's CPU per request.
type ComponentCost struct {
	Name     string  `json:"name"`
	USPerReq float64 `json:"us_per_req"`
}

// pprofSource is where a proxy serves net/http/pprof's CPU profile.
type pprofSource struct {
	profileURL string // the .../debug/pprof/profile endpoint
	// token is the admin bearer token the gateway's endpoint requires,
	// "" for none. It is never printed or logged.
	token string
}

// profileTargets are the targets --profile compares: the bare pass-through
// and the gateway in its §12 configuration.
var profileTargets = []string{tFiber, tGwS12}

// profileConns is the load while profiling: the §12 throughput point.
const profileConns = 32

// profileStartDelay lets wrk connect before the profile starts; it also
// puts the profile's encoding after the CPU reading that ends the window.
const profileStartDelay = 50 * time.Millisecond

// profileAll profiles each of profileTargets that is running, in turn,
// and writes the profiles under o.profileDir. Targets that are not
// running or could not be profiled carry the reason in Error.
func profileAll(ctx context.Context, o options, wrk, script string, active []*target) *Profile {
	p := &Profile{Conns: profileConns, DurationS: o.profileDuration.Seconds(), Components: componentNames(components)}
	for _, name := range profileTargets {
		i := slices.IndexFunc(active, func(t *target) bool { return t.name == name })
		if i < 0 {
			why := "not profiled: not among the running targets (see --targets)"
			logf("profile: %s %s", name, why)
			p.Targets = append(p.Targets, ProfiledTarget{Target: name, Error: why})
			continue
		}
		logf("profile: %s at %d connections for %s", name, profileConns, o.profileDuration)
		pt, err := profileOne(ctx, o, wrk, script, active[i])
		if err != nil {
			pt.Error = err.Error()
			logf("profile: %s: %v", name, err)
		}
		p.Targets = append(p.Targets, pt)
		if ctx.Err() != nil {
			break
		}
	}
	return p
}

// profileOne warms the target up, then drives it with wrk for
// o.profileDuration while taking a CPU profile of its process over the
// same window and reading the process's CPU from /proc before and after.
// It writes the raw profile to o.profileDir/<target>.pprof and divides the
// measured CPU per request among the components.
func profileOne(ctx context.Context, o options, wrk, script string, t *target) (ProfiledTarget, error) {
	pt := ProfiledTarget{Target: t.name}
	if t.pprof == nil || t.proxy == nil {
		return pt, errors.New("the process serves no CPU profile")
	}
	if _, err := runWrk(ctx, wrk, script, t.url, profileConns, o.threads, o.warmup); err != nil {
		return pt, fmt.Errorf("warm-up: %w", err)
	}
	pids := t.proxy()
	secs := int(o.profileDuration.Seconds())
	type fetched struct {
		data []byte
		err  error
	}
	got := make(chan fetched, 1)
	cpu0 := cpuOf(pids)
	go func() {
		select {
		case <-time.After(profileStartDelay):
		case <-ctx.Done():
		}
		data, err := fetchProfile(ctx, t.pprof, secs)
		got <- fetched{data, err}
	}()
	res, werr := runWrk(ctx, wrk, script, t.url, profileConns, o.threads, o.profileDuration)
	cpu := cpuOf(pids) - cpu0
	f := <-got
	if werr != nil {
		return pt, werr
	}
	if f.err != nil {
		return pt, f.err
	}
	if res.Requests == 0 {
		return pt, errors.New("no request served while profiling")
	}
	pt.Requests, pt.RPS, pt.CPUUSPerReq = res.Requests, res.rps(), micros(cpu)/float64(res.Requests)
	pt.File = filepath.Join(o.profileDir, t.name+".pprof")
	if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
		return pt, err
	}
	if err := os.WriteFile(pt.File, f.data, 0o644); err != nil {
		return pt, err
	}
	return pt, fillBreakdown(&pt, f.data)
}

// fillBreakdown parses a fetched profile and divides pt's measured CPU
// per request among the components.
func fillBreakdown(pt *ProfiledTarget, data []byte) error {
	prof, err := profile.ParseData(data)
	if err != nil {
		return fmt.Errorf("parse the profile of %s: %w", pt.Target, err)
	}
	costs, sampled, err := breakdown(prof, components, pt.CPUUSPerReq)
	if err != nil {
		return fmt.Errorf("%s: %w", pt.File, err)
	}
	pt.Components = costs
	pt.SampledUSPerReq = float64(sampled) / 1e3 / float64(pt.Requests)
	return nil
}

// fetchProfile takes a CPU profile of secs seconds from src. It blocks
// for those seconds. The bearer token goes in the request's header only;
// errors name the URL, never the token.
func fetchProfile(ctx context.Context, src *pprofSource, secs int) ([]byte, error) {
	u := src.profileURL + "?seconds=" + strconv.Itoa(secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if src.token != "" {
		req.Header.Set("Authorization", "Bearer "+src.token)
	}
	client := &http.Client{Timeout: time.Duration(secs)*time.Second + 30*time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the CPU profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read the profile: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d: %.200s", u, resp.StatusCode, body)
	}
	return body, nil
}
