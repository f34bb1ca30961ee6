// Command demo drives traffic through a running graygate (started by
// `task up`) and narrates a gray release going wrong: the traffic split,
// the gray version starting to break its output contract, the first bad
// gray answer that the client never sees, the analyzer's verdict, the
// rollback event, and the gateway's gray share dropping to zero; then a
// second act in which a re-enabled gray inflates its completions, and a
// fourth in which a prompt-only gray release (v1.2 → v1.3, same upstream
// and model) makes the answers longer.
//
// It talks only to the services' public interfaces: the gateway's client
// and admin APIs, the mock upstreams' /_mock/config, the collector's
// sample-store API and the analyzer's status command.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
	"github.com/graygate/graygate/schemas/tick"
)

type options struct {
	gateway, admin, grayMock, collector string
	promptMock                          string
	adminToken, apiToken, config        string
	forceToken                          string
	deployment                          string
	rate                                int
	timeout                             time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.gateway, "gateway", "http://127.0.0.1:8080", "gateway client URL")
	flag.StringVar(&o.admin, "admin", "http://127.0.0.1:8081", "gateway admin URL")
	flag.StringVar(&o.grayMock, "gray-mock", "http://127.0.0.1:9002", "the gray mock upstream")
	flag.StringVar(&o.promptMock, "prompt-mock", "http://127.0.0.1:9003", "the mock upstream behind the prompt-only release (act 4)")
	flag.StringVar(&o.collector, "collector", "http://127.0.0.1:8082", "collector URL")
	flag.StringVar(&o.adminToken, "admin-token", envOr("GRAYGATE_ADMIN_TOKEN", "demo-admin-token"), "gateway admin token")
	flag.StringVar(&o.apiToken, "api-token", envOr("GRAYGATE_API_TOKEN", "demo-api-token"), "collector API token")
	flag.StringVar(&o.forceToken, "force-token", firstToken(envOr("GRAYGATE_FORCE_TOKENS", "demo-force-token")),
		"a force token of the gateway (GRAYGATE_FORCE_TOKENS): lets a tester's request choose its arm")
	flag.StringVar(&o.config, "config", "scripts/devenv/graygate.yaml", "config file (for the analyzer and collector CLIs)")
	flag.StringVar(&o.deployment, "deployment", "qwen-32k", "the deployment with a gray release")
	flag.IntVar(&o.rate, "rate", 40, "requests per second")
	flag.DurationVar(&o.timeout, "timeout", 60*time.Second, "longest wait for the analyzer to act, per act")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// demo holds the running traffic and the timeline.
type demo struct {
	o     options
	start time.Time
	http  *http.Client

	mu          sync.Mutex
	model       string // the route the traffic uses
	arms        map[string]int
	statuses    map[int]int
	firstBad    time.Time // first answer with x-gateway-arm: fallback
	firstBadID  string
	sent        atomic.Int64
	clientSawOK atomic.Int64

	poolStatuses statusTally // answers to the pooled deployment's traffic
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o options) error {
	d := &demo{o: o, start: time.Now(), http: &http.Client{Timeout: 30 * time.Second},
		arms: map[string]int{}, statuses: map[int]int{}, model: "agent-chat"}
	fmt.Println("graygate demo: a gray release that goes wrong, and the pipeline that catches it")
	fmt.Println(strings.Repeat("=", 78))
	if err := d.checkUp(); err != nil {
		return err
	}
	st, err := d.rollout()
	if err != nil {
		return err
	}
	// Start from a healthy gray at 20%.
	_ = d.mock(map[string]any{"content": nil, "completion-tokens": nil})
	if st.Status != events.StatusActive || st.Percentage != 20 {
		if _, err := d.put(`{"status":"active","percentage":20,"reason":"demo: start a healthy gray release"}`); err != nil {
			return err
		}
		d.waitRollout(func(r rolloutState) bool { return r.Status == events.StatusActive && r.Percentage == 20 }, 10*time.Second)
	}
	st, _ = d.rollout()
	d.say("deployment %s: gray at %.2f%% (%s, revision %d)", o.deployment, st.Percentage, st.Status, st.Revision)

	ctx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	go d.traffic(ctx)
	poolCtx, stopPool := context.WithCancel(context.Background())
	defer stopPool()
	go d.poolTraffic(poolCtx)
	progressDone := make(chan struct{})
	go d.progress(ctx, progressDone)

	// Act 1: a healthy gray.
	fmt.Println("\n-- act 1: a healthy gray release --------------------------------------------")
	d.say("a tester forcing gray (force token, X-Gray-Rollout: true) gets x-gateway-arm: %s", d.forcedArm())
	d.say("meanwhile deployment %s serves model %s from pools of engine replicas (mockllm --engine);", poolDeployment, poolModel)
	d.say("one of primary's three replicas refuses connections: the gateway ejects it after 5 failures in a row;")
	d.say("until then it retries those requests on the others (retry_budget 1.0: nothing was written, so every one may be tried again)")
	time.Sleep(8 * time.Second)

	// Act 2: the gray version starts breaking its output contract.
	fmt.Println("\n-- act 2: the gray version starts breaking its JSON-Schema contract ---------")
	if err := d.mock(map[string]any{"content": "schema-break"}); err != nil {
		return err
	}
	broke := time.Now()
	d.say("gray upstream now answers JSON that violates schemas/contracts/agent-action.schema.json")
	if err := d.awaitRollback(broke); err != nil {
		return err
	}

	// Act 3: re-enable gray; this time it inflates its completions.
	fmt.Println("\n-- act 3: gray re-enabled, now inflating its completions ---------------------")
	if err := d.mock(map[string]any{"content": nil, "completion-tokens": 40}); err != nil {
		return err
	}
	d.say("gray upstream answers valid JSON again, but with 40 completion tokens (primary: 16)")
	if _, err := d.put(`{"status":"active","percentage":20,"reason":"demo: re-enable gray after the fix"}`); err != nil {
		return err
	}
	d.mu.Lock()
	d.firstBad = time.Time{}
	d.mu.Unlock()
	d.waitRollout(func(r rolloutState) bool { return r.Status == events.StatusActive }, 10*time.Second)
	d.say("gray re-enabled at 20%% through PUT /admin/rollouts/%s", o.deployment)
	if err := d.awaitRollback(time.Now()); err != nil {
		return err
	}
	_ = d.mock(map[string]any{"content": nil, "completion-tokens": nil})

	// Act 4: a prompt-only gray release on the same upstream and model.
	fmt.Println("\n-- act 4: a prompt-only gray (v1.2 → v1.3) that makes answers longer ---------")
	if err := d.promptAct(); err != nil {
		return err
	}
	stopTraffic()
	<-progressDone
	_ = d.mockAt(d.o.promptMock, map[string]any{"inflate-on": nil})

	fmt.Println("\n-- the replica pools ---------------------------------------------------------")
	d.pool(stopPool)

	fmt.Println("\n-- what the sample store kept ------------------------------------------------")
	d.summary()
	return nil
}

// checkUp makes sure the gateway answers.
func (d *demo) checkUp() error {
	resp, err := d.http.Get(d.o.admin + "/readyz")
	if err != nil {
		return fmt.Errorf("the gateway is not running (%v): run `task up` first", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d.say("gateway %s", strings.TrimSpace(string(b)))
	return nil
}

// rolloutState is a deployment as the admin API answers it.
type rolloutState = events.RolloutEntry

func (d *demo) adminDo(method, path, body string) ([]byte, int, error) {
	req, _ := http.NewRequest(method, d.o.admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.o.adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

// deployment is the deployment of the current act.
func (d *demo) deployment() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.o.deployment
}

func (d *demo) rollout() (rolloutState, error) {
	dep := d.deployment()
	b, code, err := d.adminDo(http.MethodGet, "/admin/rollouts", "")
	if err != nil || code != 200 {
		return rolloutState{}, fmt.Errorf("GET /admin/rollouts: %d %s %v", code, b, err)
	}
	var out struct{ Rollouts []rolloutState }
	if err := json.Unmarshal(b, &out); err != nil {
		return rolloutState{}, err
	}
	for _, r := range out.Rollouts {
		if r.Deployment == dep {
			return r, nil
		}
	}
	return rolloutState{}, fmt.Errorf("deployment %s has no gray release", dep)
}

func (d *demo) put(body string) (rolloutState, error) {
	dep := d.deployment()
	b, code, err := d.adminDo(http.MethodPut, "/admin/rollouts/"+dep, body)
	if err != nil || code != 200 {
		return rolloutState{}, fmt.Errorf("PUT /admin/rollouts/%s: %d %s %v", dep, code, b, err)
	}
	var r rolloutState
	return r, json.Unmarshal(b, &r)
}

func (d *demo) waitRollout(ok func(rolloutState) bool, within time.Duration) (rolloutState, bool) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if r, err := d.rollout(); err == nil && ok(r) {
			return r, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, _ := d.rollout()
	return r, false
}

// promptAct moves the traffic to the prompt-only release: deployment
// agent-prompt sends prompt v1.2 on primary and v1.3 on gray to the same
// mock, which answers 1.6 times longer when it sees v1.3's marker — the
// token-inflation gate rolls it back.
func (d *demo) promptAct() error {
	if err := d.mockAt(d.o.promptMock, map[string]any{"inflate-on": "[agent prompt v1.3]:1.6"}); err != nil {
		return err
	}
	d.mu.Lock()
	d.model, d.firstBad = "agent-chat-prompt", time.Time{}
	d.o.deployment = "agent-prompt"
	d.mu.Unlock()
	d.say("route agent-chat-prompt → deployment agent-prompt: one upstream, primary prompt v1.2, gray prompt v1.3")
	d.say("the upstream answers 1.6× longer when the system prompt is v1.3 (x-gateway-prompt-version tells the arms apart)")
	if _, err := d.put(`{"status":"active","percentage":20,"reason":"demo: prompt v1.3 gray release"}`); err != nil {
		return err
	}
	d.waitRollout(func(r rolloutState) bool { return r.Status == events.StatusActive }, 10*time.Second)
	return d.awaitRollback(time.Now())
}

// mock changes the gray mock's live behaviour.
func (d *demo) mock(settings map[string]any) error { return d.mockAt(d.o.grayMock, settings) }

// mockAt changes the live behaviour of the mock at base.
func (d *demo) mockAt(base string, settings map[string]any) error {
	b, _ := json.Marshal(settings)
	req, _ := http.NewRequest(http.MethodPut, base+"/_mock/config", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		return fmt.Errorf("the mock at %s does not answer: %w", base, err)
	}
	resp.Body.Close()
	return nil
}

// traffic sends requests at the configured rate from 200 users.
func (d *demo) traffic(ctx context.Context) {
	tick.Every(ctx, time.Second/time.Duration(d.o.rate), func() bool { go d.one(); return true })
}

func (d *demo) one() {
	user := fmt.Sprintf("user-%03d", rand.IntN(200))
	d.mu.Lock()
	model := d.model
	d.mu.Unlock()
	body := `{"model":"` + model + `","user":"` + user + `","messages":[{"role":"user","content":"What should the agent do next?"}]}`
	resp, err := d.http.Post(d.o.gateway+"/v1/chat/completions", "application/json", strings.NewReader(body))
	d.sent.Add(1)
	if err != nil {
		d.mu.Lock()
		d.statuses[0]++
		d.mu.Unlock()
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	arm := resp.Header.Get("x-gateway-arm")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.statuses[resp.StatusCode]++
	d.arms[arm]++
	if resp.StatusCode == 200 {
		d.clientSawOK.Add(1)
	}
	if events.Arm(arm) == events.ArmFallback && d.firstBad.IsZero() {
		d.firstBad, d.firstBadID = time.Now(), resp.Header.Get("x-request-id")
		d.say("first bad gray answer: request %s — the client got primary's answer (HTTP %d, x-gateway-arm: fallback)",
			d.firstBadID, resp.StatusCode)
	}
}

// The deployment whose arms are pools of engine replicas
// (scripts/devenv/graygate.yaml), and the model that routes to it.
const (
	poolDeployment = "qwen-pool"
	poolModel      = "agent-chat-pool"
)

// poolSystemPrompt makes each user's conversation start with more than
// two of the prefix index's 256-byte blocks, so that the prefix balancer
// sends a user's next turn where the last one was served.
const poolSystemPrompt = "Plan one step at a time. Each answer is a JSON object with the action to take and its parameters; " +
	"prefer reading before writing, never delete without a backup, and stop to ask when an instruction is ambiguous. " +
	"Keep the plan short: at most five steps, each naming the tool it uses, what it expects back and what it does " +
	"when the tool fails. Quote file names exactly. Do not invent tools."

// poolTraffic sends a quarter of the demo's rate (at least one a second)
// to the pooled deployment, conversations of a few turns from 50 users,
// so that the prefix balancer has something to follow. Its answers are
// counted apart from the acts' traffic.
func (d *demo) poolTraffic(ctx context.Context) {
	rate := max(1, d.o.rate/4)
	tick.Every(ctx, time.Second/time.Duration(rate), func() bool {
		go func() {
			user := rand.IntN(50)
			body := fmt.Sprintf(`{"model":%q,"user":"pool-user-%02d","max_tokens":16,"messages":[`+
				`{"role":"system","content":"You are the planning agent of user %02d. %s"},`+
				`{"role":"user","content":"What should the agent do next, turn %d?"}]}`, poolModel, user, user, poolSystemPrompt, rand.IntN(4))
			resp, err := d.http.Post(d.o.gateway+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				d.poolStatuses.add(0)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			d.poolStatuses.add(resp.StatusCode)
		}()
		return true
	})
}

// statusTally counts HTTP statuses from several goroutines.
type statusTally struct {
	mu sync.Mutex
	m  map[int]int
}

func (t *statusTally) add(status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[int]int{}
	}
	t.m[status]++
}

func (t *statusTally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return statusCounts(t.m)
}

// pool waits (while its traffic goes on, at most a minute) until a
// replica of the pooled deployment is ejected, stops that traffic, and
// prints the pools as `gateway upstreams` does.
func (d *demo) pool(stopTraffic func()) {
	deadline := time.Now().Add(time.Minute)
	for {
		ups, err := d.upstreams()
		if err != nil {
			d.say("GET /admin/upstreams: %v", err)
			break
		}
		ejected := false
		for _, u := range ups {
			for _, r := range u.Replicas {
				ejected = ejected || u.Deployment == poolDeployment && r.State == events.ReplicaEjected
			}
		}
		if ejected || time.Now().After(deadline) {
			stopTraffic()
			for _, u := range ups {
				if u.Deployment != poolDeployment {
					continue
				}
				states := map[events.ReplicaState][]string{}
				for _, r := range u.Replicas {
					states[r.State] = append(states[r.State], r.Replica)
				}
				d.say("%s %s: %d of %d replicas healthy; ejected: %v", u.Deployment, u.Arm,
					len(states[events.ReplicaHealthy]), len(u.Replicas), states[events.ReplicaEjected])
			}
			break
		}
		time.Sleep(time.Second)
	}
	d.say("requests to %s: HTTP statuses the clients got: %s", poolDeployment, &d.poolStatuses)
	cmd := exec.Command("bin/gateway", "upstreams", "--config", d.o.config)
	cmd.Env = append(os.Environ(), "GRAYGATE_ADMIN_TOKEN="+d.o.adminToken)
	if out, err := cmd.CombinedOutput(); err == nil || len(out) > 0 {
		fmt.Println(string(out))
	}
}

// armUpstreams is one arm's entry of GET /admin/upstreams.
type armUpstreams struct {
	Deployment string `json:"deployment"`
	events.ArmReplicas
}

func (d *demo) upstreams() ([]armUpstreams, error) {
	b, status, err := d.adminDo(http.MethodGet, "/admin/upstreams", "")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", status)
	}
	var up struct {
		Upstreams []armUpstreams `json:"upstreams"`
	}
	err = json.Unmarshal(b, &up)
	return up.Upstreams, err
}

// progress prints the traffic split every two seconds.
func (d *demo) progress(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick.Every(ctx, 2*time.Second, func() bool { d.printSplit(); return true })
}

// printSplit prints the arms that answered since it last ran, and the
// rollout's state.
func (d *demo) printSplit() {
	d.mu.Lock()
	p, g, f := d.arms[string(events.ArmPrimary)], d.arms[string(events.ArmGray)], d.arms[string(events.ArmFallback)]
	non200 := 0
	for code, n := range d.statuses {
		if code != 200 {
			non200 += n
		}
	}
	clear(d.arms)
	d.mu.Unlock()
	r, _ := d.rollout()
	d.say("traffic: %3d primary  %3d gray  %3d fallback  | client errors so far: %d | rollout %s %.2f%%",
		p, g, f, non200, r.Status, r.Percentage)
}

// awaitRollback waits for the analyzer's rollback to reach the gateway and
// prints what happened.
func (d *demo) awaitRollback(since time.Time) error {
	r, ok := d.waitRollout(func(r rolloutState) bool { return r.Status == events.StatusRolledBack }, d.o.timeout)
	if !ok {
		return fmt.Errorf("no rollback within %v (is the analyzer running? see .data/logs/analyzer.log)", d.o.timeout)
	}
	applied := time.Now()
	d.mu.Lock()
	first := d.firstBad
	d.mu.Unlock()
	d.say("ROLLBACK applied by the gateway: %s at %.2f%% (revision %d, actor %s)", r.Status, r.Percentage, r.Revision, r.Actor)
	d.say("  reason: %s", text.Escape(r.Reason))
	if !first.IsZero() {
		d.say("  first bad gray answer → rollback applied: %.2fs", applied.Sub(first).Seconds())
	} else {
		d.say("  misbehaviour began → rollback applied: %.2fs", applied.Sub(since).Seconds())
	}
	d.analyzerStatus()
	d.rolloutHistory()
	// Show that the gray share is really zero now, even for a tester
	// whose force token may choose the arm.
	d.say("  a tester forcing gray (force token, X-Gray-Rollout: true) now gets x-gateway-arm: %s", d.forcedArm())
	return nil
}

// forcedArm sends one request of a tester that forces gray with a force
// token and returns the arm that answered it.
func (d *demo) forcedArm() string {
	d.mu.Lock()
	model := d.model
	d.mu.Unlock()
	req := mustReq(d.o.gateway, `{"model":"`+model+`","messages":[{"role":"user","content":"What should the agent do next?"}]}`,
		"X-Gray-Rollout", "true", "Authorization", "Bearer "+d.o.forceToken)
	resp, err := d.http.Do(req)
	if err != nil {
		return "(no answer: " + err.Error() + ")"
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("(HTTP %d)", resp.StatusCode)
	}
	return resp.Header.Get("x-gateway-arm")
}

// tokenHint names the development token, and only says where a real one
// comes from.
func tokenHint(token string) string {
	if token == "demo-api-token" {
		return "demo-api-token, the development token of scripts/devenv/graygate.yaml"
	}
	return "the value of GRAYGATE_API_TOKEN"
}

// firstToken returns the first of a comma-separated token list.
func firstToken(list string) string {
	first, _, _ := strings.Cut(list, ",")
	return strings.TrimSpace(first)
}

// statusCounts formats HTTP status counts as "200: 1009, 502: 1", by status.
func statusCounts(m map[int]int) string {
	codes := make([]int, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	parts := make([]string, 0, len(codes))
	for _, c := range codes {
		name := strconv.Itoa(c)
		if c == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, m[c]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func mustReq(base, body string, headers ...string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return req
}

// analyzerStatus prints `analyzer status` when the analyzer is built.
func (d *demo) analyzerStatus() {
	cmd := exec.Command("bin/analyzer", "status", "--config", d.o.config)
	cmd.Env = asIdentity("analyzer")
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		return
	}
	d.say("  analyzer status:")
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("            " + l)
	}
}

// rolloutHistory prints the deployment's last rollout events as the
// collector stored them.
func (d *demo) rolloutHistory() {
	req, _ := http.NewRequest(http.MethodGet, d.o.collector+"/v1/rollouts/"+d.deployment()+"/history?limit=3", nil)
	req.Header.Set("Authorization", "Bearer "+d.o.apiToken)
	var body []byte
	for i := 0; i < 20; i++ { // the collector writes in batches
		resp, err := d.http.Do(req)
		if err != nil {
			return
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(body, []byte("rolled_back")) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var out struct {
		Events []map[string]any `json:"data"`
	}
	if json.Unmarshal(body, &out) != nil || len(out.Events) == 0 {
		d.say("  rollout history (collector): %s", strings.TrimSpace(string(body)))
		return
	}
	d.say("  rollout events stored by the collector (newest first):")
	for i, e := range out.Events {
		if i == 3 {
			break
		}
		fmt.Printf("            seq %-4v %-24v %-11v %6v%%  %-8v %v\n", e["stream_sequence"], e["occurred_at"], e["status"], e["percentage"], e["actor"], e["reason"])
	}
}

// summary prints the client's view and the sample store.
func (d *demo) summary() {
	d.mu.Lock()
	codes := statusCounts(d.statuses)
	d.mu.Unlock()
	d.say("requests sent: %d; HTTP statuses the clients got: %s", d.sent.Load(), codes)
	cmd := exec.Command("bin/collector", "samples", "list", "--since", "15m", "--limit", "8", "--config", d.o.config)
	cmd.Env = asIdentity("collector")
	out, err := cmd.CombinedOutput()
	if err == nil || len(out) > 0 {
		fmt.Println(string(out))
	}
	fmt.Println("Inspect what the gray version returned when it broke the contract:")
	fmt.Println("  . .data/env   # DATABASE_URL of the development Postgres")
	fmt.Println("  bin/collector samples list --since 1h --config " + d.o.config)
	fmt.Println("  bin/collector samples show <event-id> --config " + d.o.config)
	fmt.Println()
	fmt.Println("Open the operator's console to see the rollouts, their gates over time and the failing payloads:")
	fmt.Println("  " + d.o.collector + "/   (sign in with the collector's API token: " + tokenHint(d.o.apiToken) + ")")
	fmt.Println("Everything keeps running: `task down` stops it.")
}

// asIdentity is the environment of a service's command the demo runs:
// scripts/devenv/graygate.yaml names the NATS identity in
// GRAYGATE_NATS_USER and GRAYGATE_NATS_PASSWORD, which `devenv start` sets
// for each service; here they come from the identity's password in
// .data/env (NATS_ANALYZER_PASSWORD, …), which task demo sources. Without
// it (a NATS of another setup) the environment is left as it is.
func asIdentity(user string) []string {
	env := os.Environ()
	pw := os.Getenv("NATS_" + strings.ToUpper(user) + "_PASSWORD")
	if pw == "" || os.Getenv("GRAYGATE_NATS_USER") != "" {
		return env
	}
	return append(env, "GRAYGATE_NATS_USER="+user, "GRAYGATE_NATS_PASSWORD="+pw)
}
