package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const e2eEventsConfig = `
nats: {url: {{NATS}}}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
  admin_token: admin-secret
  spool_dir: {{SPOOL}}
  request_log: all # these tests check every request's event
  rollout_stale_after: 2s
routing:
  routes:
    - model: agent-chat
      candidates: [{deployment: qwen}]
deployments:
  qwen:
    primary: {url: {{PRIMARY}}, model: qwen-v1}
    gray: {url: {{GRAY}}, model: qwen-v2}
    rollout:
      percentage: 0
      response_schema: schemas/contracts/agent-action.schema.json
`

type rolloutView struct {
	Deployment string  `json:"deployment"`
	Percentage float64 `json:"percentage"`
	Status     string  `json:"status"`
	Revision   uint64  `json:"revision"`
	Actor      string  `json:"actor"`
	Known      bool    `json:"known"`
	UpdatedAt  string  `json:"updated_at"`
}

func admin(t *testing.T, gw *testenv.Gateway, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, gw.Admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer admin-secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func rolloutOf(t *testing.T, gw *testenv.Gateway) rolloutView {
	t.Helper()
	code, b := admin(t, gw, http.MethodGet, "/admin/rollouts", "")
	var out struct{ Rollouts []rolloutView }
	if code != 200 || json.Unmarshal(b, &out) != nil || len(out.Rollouts) != 1 {
		t.Fatalf("GET /admin/rollouts = %d %s", code, b)
	}
	return out.Rollouts[0]
}

func startEventsGateway(t *testing.T, natsURL, primary, gray string) *testenv.Gateway {
	t.Helper()
	cfg := strings.NewReplacer("{{NATS}}", natsURL, "{{PRIMARY}}", primary, "{{GRAY}}", gray,
		"{{SPOOL}}", t.TempDir()).Replace(e2eEventsConfig)
	gw := testenv.StartGateway(t, cfg)
	testenv.WaitFor(t, 10*time.Second, "the rollout state to be read from the log", func() bool {
		return rolloutOf(t, gw).Known
	})
	return gw
}

func chat(t *testing.T, gw *testenv.Gateway, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"agent-chat","messages":[{"role":"user","content":"hi"}]}`))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestE2ERolloutOwnedByTheEventLog(t *testing.T) {
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t, "--content", "schema-break")
	gw := startEventsGateway(t, ns.URL, primary.URL, gray.URL)

	// The config's percentage was appended to the empty log (actor config).
	r := rolloutOf(t, gw)
	if r.Percentage != 0 || r.Status != "active" || r.Actor != "config" || r.Revision == 0 {
		t.Fatalf("initial rollout = %+v; want 0%% active from config with a revision", r)
	}

	cases := []struct {
		name string
		body string
		code int
		err  string
	}{
		{"unknown deployment", `{"percentage": 5}`, 404, "unknown_deployment"},
		{"percentage out of range", `{"percentage": 101}`, 400, "bad_request"},
		{"three decimals", `{"percentage": 1.005}`, 400, "bad_request"},
		// Judged as written: a float64 would round these to valid values.
		{"a hair past two decimals", `{"percentage": 10.000000001, "reason": "r"}`, 400, "bad_request"},
		{"below the smallest float", `{"percentage": 1e-400, "reason": "r"}`, 400, "bad_request"},
		// The second object would be dropped unread.
		{"two objects", `{"percentage": 5, "reason": "r"}{"status": "rolled_back"}`, 400, "bad_request"},
		{"text after the object", `{"percentage": 5, "reason": "r"} and more`, 400, "bad_request"},
		{"stale expected revision", fmt.Sprintf(`{"percentage": 5, "expected_revision": %d}`, r.Revision+7), 409, "revision_conflict"},
	}
	for _, c := range cases {
		path := "/admin/rollouts/qwen"
		if c.err == "unknown_deployment" {
			path = "/admin/rollouts/nope"
		}
		code, b := admin(t, gw, http.MethodPut, path, c.body)
		if code != c.code || !bytes.Contains(b, []byte(c.err)) {
			t.Errorf("%s: PUT = %d %s; want %d %s", c.name, code, b, c.code, c.err)
		}
	}

	// 100 % gray through the admin API: the gateway applies it when the
	// event comes back from the log.
	code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen",
		fmt.Sprintf(`{"percentage": 100, "reason": "e2e", "expected_revision": %d}`, r.Revision))
	if code != 200 {
		t.Fatalf("PUT 100%% = %d %s", code, b)
	}
	testenv.WaitFor(t, 2*time.Second, "gray at 100%", func() bool { return rolloutOf(t, gw).Percentage == 100 })
	// The answer is the entry as stored: its time is the event's.
	var put rolloutView
	if err := json.Unmarshal(b, &put); err != nil || put.UpdatedAt == "" || put.UpdatedAt != rolloutOf(t, gw).UpdatedAt {
		t.Errorf("PUT answered updated_at %q; GET says %q for the same revision", put.UpdatedAt, rolloutOf(t, gw).UpdatedAt)
	}
	if resp := chat(t, gw); resp.Header.Get("x-gateway-arm") != "fallback" {
		t.Errorf("arm %q; want fallback (gray breaks the schema)", resp.Header.Get("x-gateway-arm"))
	}

	// Rolled back: primary whatever the force header says; a percentage
	// alone is refused until the deployment is re-activated.
	if code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", `{"status": "rolled_back", "reason": "e2e"}`); code != 200 {
		t.Fatalf("PUT rolled_back = %d %s", code, b)
	}
	testenv.WaitFor(t, 2*time.Second, "the rollback", func() bool { return rolloutOf(t, gw).Status == "rolled_back" })
	if resp := chat(t, gw, "X-Gray-Rollout", "true"); resp.Header.Get("x-gateway-arm") != "primary" {
		t.Errorf("after rollback with force header: arm %q; want primary", resp.Header.Get("x-gateway-arm"))
	}
	if code, b := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", `{"percentage": 5}`); code != 409 || !bytes.Contains(b, []byte(`"rolled_back"`)) {
		t.Errorf("percentage while rolled back = %d %s; want 409 rolled_back", code, b)
	}

	// A gateway started after the rollback comes up rolled back.
	late := startEventsGateway(t, ns.URL, primary.URL, gray.URL)
	if r := rolloutOf(t, late); r.Status != "rolled_back" || r.Percentage != 0 {
		t.Errorf("late gateway state %+v; want rolled_back", r)
	}

	// Every request, rejection and sample is in the stream, valid against
	// its JSON Schema.
	nc, err := nats.Connect(ns.URL)
	testenv.Must(t, err)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	chat(t, gw, "X-Request-Id", "e2e-last")
	got := map[string]int{}
	testenv.WaitFor(t, 10*time.Second, "request events in GRAYGATE_EVENTS", func() bool {
		got = readEvents(t, js)
		return got[events.TypeRequestCompleted] >= 3 && got[events.TypeSampleMalformed] >= 1
	})

	// NATS down: the admin API cannot record changes, traffic still flows.
	ns.Stop()
	if resp := chat(t, gw); resp.StatusCode != 200 {
		t.Errorf("with NATS down: status %d; want 200", resp.StatusCode)
	}
	testenv.WaitFor(t, 5*time.Second, "the admin API to refuse changes", func() bool {
		code, _ := admin(t, gw, http.MethodPut, "/admin/rollouts/qwen", `{"status": "active", "percentage": 1}`)
		return code == 503
	})
}

// readEvents counts the events of each type in GRAYGATE_EVENTS, checking
// each against its JSON Schema.
func readEvents(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil
	}
	counts := map[string]int{}
	for {
		msgs, err := cons.FetchNoWait(500)
		if err != nil {
			return counts
		}
		n := 0
		for m := range msgs.Messages() {
			n++
			env, err := events.Decode(m.Data())
			if err != nil {
				t.Errorf("undecodable event: %v", err)
				continue
			}
			if err := events.Validate(env.Type, env.Data); err != nil {
				t.Errorf("%s event fails its schema: %v\n%s", env.Type, err, env.Data)
			}
			if m.Headers().Get("Nats-Msg-Id") != env.ID {
				t.Errorf("Nats-Msg-Id %q is not the event id %q", m.Headers().Get("Nats-Msg-Id"), env.ID)
			}
			counts[env.Type]++
		}
		if n == 0 {
			return counts
		}
	}
}

func TestE2ERolloutPropagation(t *testing.T) {
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gws := []*testenv.Gateway{
		startEventsGateway(t, ns.URL, primary.URL, primary.URL),
		startEventsGateway(t, ns.URL, primary.URL, primary.URL),
	}
	nc, err := nats.Connect(ns.URL)
	testenv.Must(t, err)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// Each change is stored through JetStream (as the admin API and the
	// analyzer do); the clock runs from its acknowledgement until both
	// gateways report it. 300 changes, so that the p99 is not the one
	// slowest (a scheduling hiccup of a loaded 2-core machine), and the
	// polling leaves the gateways a core (a 200 µs pause between polls).
	var lat []time.Duration
	for i := 1; i <= 300; i++ {
		pct := float64(i%100) + 0.5
		ev := &events.RolloutChanged{Deployment: "qwen", Percentage: pct, Status: events.StatusActive, Reason: "propagation", Actor: events.ActorAdmin}
		env, err := events.NewEnvelope(events.TypeRolloutChanged, "test", ev, time.Now(), testenv.UUIDv7(t))
		testenv.Must(t, err)
		b, _ := json.Marshal(env)
		_, err = js.Publish(context.Background(), events.RolloutSubject("qwen"), b)
		testenv.Must(t, err)
		stored := time.Now()
		for _, gw := range gws {
			for rolloutOf(t, gw).Percentage != pct {
				if time.Since(stored) > 2*time.Second {
					t.Fatalf("change %d not applied after 2s", i)
				}
				time.Sleep(200 * time.Microsecond)
			}
		}
		lat = append(lat, time.Since(stored))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("rollout propagation to 2 gateways over %d changes (including the polling of GET /admin/rollouts): p50 %v, p99 %v, max %v",
		len(lat), p50, p99, lat[len(lat)-1])
	if p99 > 50*time.Millisecond {
		t.Errorf("p99 propagation %v; the hard limit is 50ms", p99)
	}
}

// TestE2ESecretsNeverLeak plants an upstream key, a client token and an
// admin token, drives traffic that exercises success, refusals, gray
// fallbacks, samples and the admin API, then searches everything the run
// produced — the gateway's log, every event stored, what the upstreams
// received — for them.
func TestE2ESecretsNeverLeak(t *testing.T) {
	const (
		upstreamKey = "sk-planted-upstream-7f3a9c"
		clientToken = "ct-planted-client-91bd2e"
		adminToken  = "adm-planted-admin-55c1d0"
	)
	ns := testenv.StartNATS(t)
	primary := testenv.StartMock(t)
	gray := testenv.StartMock(t, "--content", "schema-break")
	cfg := strings.NewReplacer("{{NATS}}", ns.URL, "{{PRIMARY}}", primary.URL, "{{GRAY}}", gray.URL,
		"{{SPOOL}}", t.TempDir(), "admin_token: admin-secret", "client_tokens_env: E2E_CLIENT_TOKENS",
		"model: qwen-v1}", "model: qwen-v1, api_key_env: E2E_PRIMARY_KEY}",
		"percentage: 0", "percentage: 100").Replace(e2eEventsConfig)
	cfg += "sampling_contract:\n  params: {temperature: 0.7}\n"
	gw := testenv.StartGateway(t, cfg, "E2E_CLIENT_TOKENS="+clientToken, "E2E_PRIMARY_KEY="+upstreamKey,
		"GRAYGATE_ADMIN_TOKEN="+adminToken)

	send := func(token, body string) int {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	ok := `{"model":"agent-chat","messages":[{"role":"user","content":"hi"}]}`
	testenv.WaitFor(t, 10*time.Second, "gray at 100% from the log", func() bool {
		return send(clientToken, ok) == 200 && len(gray.Requests(t)) > 0
	})
	for _, c := range []struct {
		token, body string
		want        int
	}{
		{clientToken, ok, 200},
		{"wrong-" + clientToken, ok, 401},
		{clientToken, `{"model":"agent-chat","temperature":0.1}`, 400},
		{clientToken, `{"model":"agent-chat","stream":true,"messages":[]}`, 200},
	} {
		if got := send(c.token, c.body); got != c.want {
			t.Errorf("status %d; want %d", got, c.want)
		}
	}
	for _, tok := range []string{"wrong", adminToken} {
		req, _ := http.NewRequest(http.MethodGet, gw.Admin+"/admin/rollouts", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		resp.Body.Close()
	}

	nc, err := nats.Connect(ns.URL)
	testenv.Must(t, err)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var stored bytes.Buffer
	testenv.WaitFor(t, 10*time.Second, "the samples in the event log", func() bool {
		stored.Reset()
		for _, stream := range []string{events.StreamEvents, events.StreamRollout} {
			cons, err := js.OrderedConsumer(context.Background(), stream, jetstream.OrderedConsumerConfig{})
			if err != nil {
				return false
			}
			for {
				msgs, err := cons.FetchNoWait(500)
				if err != nil {
					break
				}
				n := 0
				for m := range msgs.Messages() {
					n++
					stored.Write(m.Data())
					for k, v := range m.Headers() {
						stored.WriteString(k + strings.Join(v, ","))
					}
				}
				if n == 0 {
					break
				}
			}
		}
		return bytes.Contains(stored.Bytes(), []byte(events.TypeSampleMalformed))
	})
	upstreamSaw := ""
	for _, m := range []*testenv.Mock{primary, gray} {
		for _, r := range m.Requests(t) {
			upstreamSaw += r.Body + fmt.Sprint(r.Headers)
		}
	}
	places := map[string]string{"the gateway's log": gw.Stderr(), "the event log": stored.String()}
	for where, text := range places {
		for _, secret := range []string{upstreamKey, clientToken, adminToken} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains a planted secret %q", where, secret)
			}
		}
	}
	for _, secret := range []string{clientToken, adminToken} {
		if strings.Contains(upstreamSaw, secret) {
			t.Errorf("an upstream received the planted secret %q", secret)
		}
	}
	if !strings.Contains(upstreamSaw, upstreamKey) {
		t.Errorf("the primary never received its own key: the test did not exercise it")
	}
}
