package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// signedConfig is a gateway whose rollout log is signed (SPEC §7 rev. 4):
// {{SIGNERS}} is nats.rollout_signers, {{KEY}} the gateway's seed file.
const signedConfig = `
nats:
  url: {{NATS}}
  rollout_signers: {{SIGNERS}}
gateway:
  listen: {{LISTEN}}
  admin_listen: {{ADMIN}}
  admin_token: shared-admin-token-of-at-least-32-bytes
  spool_dir: {{SPOOL}}
  rollout_stale_after: 2s
  rollout_signing_key_file: {{KEY}}
  gray_unwatched_after: {{UNWATCHED}}
  unwatched_recover_after: 2s
  unwatched_hold_above: 10
routing:
  routes:
    - model: agent-chat
      candidates: [{deployment: qwen}]
    - model: big-chat
      candidates: [{deployment: big}]
deployments:
  qwen:
    primary: {url: {{PRIMARY}}, model: qwen-v1}
    gray: {url: {{GRAY}}, model: qwen-v2}
    rollout: {percentage: 0}
  big:
    primary: {url: {{PRIMARY}}, model: big-v1}
    gray: {url: {{GRAY}}, model: big-v2}
    rollout: {percentage: 0}
`

// Operators' tokens (GRAYGATE_ADMIN_TOKENS) and the shared one.
const (
	sharedToken = "shared-admin-token-of-at-least-32-bytes"
	aliceToken  = "alice-token-0123456789abcdef0123456789"
	bobToken    = "bob-token-0123456789abcdef0123456789ab"
)

// key is a user nkey and the file holding its seed.
type key struct {
	kp   nkeys.KeyPair
	pub  string
	file string
}

func newKey(t *testing.T, name string) key {
	t.Helper()
	kp, err := nkeys.CreateUser()
	testenv.Must(t, err)
	seed, err := kp.Seed()
	testenv.Must(t, err)
	pub, err := kp.PublicKey()
	testenv.Must(t, err)
	file := filepath.Join(t.TempDir(), name+".nk")
	testenv.Must(t, os.WriteFile(file, seed, 0o600))
	return key{kp, pub, file}
}

// signers is nats.rollout_signers in flow YAML.
func signers(analyzer []key, gateways ...key) string {
	list := func(ks []key) string {
		var pubs []string
		for _, k := range ks {
			pubs = append(pubs, k.pub)
		}
		return "[" + strings.Join(pubs, ", ") + "]"
	}
	return fmt.Sprintf("{analyzer: %s, admin: %s, config: %s}", list(analyzer), list(gateways), list(gateways))
}

type signedEnv struct {
	t                   *testing.T
	nats, primary, gray string
	nc                  *nats.Conn
	js                  jetstream.JetStream
	analyzer, gw1, gw2  key
	unwatched           string
	current             *testenv.Gateway
	tmpl                string // the gateway's configuration; "" is signedConfig
}

func (e *signedEnv) start(signerList string, k key) *testenv.Gateway {
	e.t.Helper()
	if e.current != nil {
		_ = e.current.Cmd.Process.Kill()
		_ = e.current.Cmd.Wait()
	}
	tmpl := e.tmpl
	if tmpl == "" {
		tmpl = signedConfig
	}
	cfg := strings.NewReplacer("{{NATS}}", e.nats, "{{PRIMARY}}", e.primary, "{{GRAY}}", e.gray,
		"{{SPOOL}}", e.t.TempDir(), "{{SIGNERS}}", signerList, "{{KEY}}", k.file, "{{UNWATCHED}}", e.unwatched).Replace(tmpl)
	gw := testenv.StartGateway(e.t, cfg, "GRAYGATE_ADMIN_TOKENS=alice="+aliceToken+",bob="+bobToken)
	testenv.WaitFor(e.t, 10*time.Second, "the rollout state to be read from the log", func() bool {
		return entryOf(e.t, gw, "qwen").Known
	})
	e.current = gw
	return gw
}

// signedEntry is an entry of GET /admin/rollouts with what these tests read.
type signedEntry struct {
	Deployment string  `json:"deployment"`
	Percentage float64 `json:"percentage"`
	Status     string  `json:"status"`
	Revision   uint64  `json:"revision"`
	Actor      string  `json:"actor"`
	Operator   string  `json:"operator"`
	Reason     string  `json:"reason"`
	Note       string  `json:"note"`
	Known      bool    `json:"known"`
}

func adminAs(t *testing.T, gw *testenv.Gateway, token, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, gw.Admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func entryOf(t *testing.T, gw *testenv.Gateway, deployment string) signedEntry {
	t.Helper()
	code, b := adminAs(t, gw, sharedToken, http.MethodGet, "/admin/rollouts", "")
	var out struct{ Rollouts []signedEntry }
	if code != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("GET /admin/rollouts = %d %s", code, b)
	}
	for _, e := range out.Rollouts {
		if e.Deployment == deployment {
			return e
		}
	}
	t.Fatalf("GET /admin/rollouts has no %s: %s", deployment, b)
	return signedEntry{}
}

// metric returns the value of one series on the gateway's /metrics ("" when absent).
func metric(t *testing.T, gw *testenv.Gateway, series string) string {
	t.Helper()
	resp, err := http.Get(gw.Admin + "/metrics")
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// publishAs stores a rollout event on subject, signed with k (nil:
// unsigned), with prev as its prev_revision; it returns the sequence.
// With appended, it is stored as every writer appends: with the header
// Nats-Expected-Last-Subject-Sequence at prev, which the server checks and
// keeps (readers require it); without, as a raw publish.
func (e *signedEnv) publishAs(k nkeys.KeyPair, subject string, ev *events.RolloutChanged, prev uint64, appended bool) (uint64, []byte, nats.Header) {
	e.t.Helper()
	ev.Revision, ev.PrevRevision = prev, &prev
	env, err := events.NewEnvelope(events.TypeRolloutChanged, "test/forger", ev, time.Now(), "")
	testenv.Must(e.t, err)
	body, err := json.Marshal(env)
	testenv.Must(e.t, err)
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	if k != nil {
		msg.Header, err = events.Sign(k, body)
		testenv.Must(e.t, err)
	}
	if !appended {
		return e.republish(msg), body, msg.Header
	}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := e.js.PublishMsg(ctx, msg)
	testenv.Must(e.t, err)
	return ack.Sequence, body, msg.Header
}

// republish stores msg as it is (a new message id each time).
func (e *signedEnv) republish(msg *nats.Msg) uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := &nats.Msg{Subject: msg.Subject, Data: msg.Data, Header: nats.Header{}}
	for k, v := range msg.Header {
		if k != nats.MsgIdHdr && !strings.HasPrefix(k, "Nats-Expected") {
			m.Header[k] = v // what the first append expected no longer holds
		}
	}
	ack, err := e.js.PublishMsg(ctx, m)
	testenv.Must(e.t, err)
	return ack.Sequence
}

// TestE2ESignedRolloutLog drives the rev. 4 rollout log through the real
// gateway (SPEC §7 "Signed rollout events", §3, §11): operators' tokens
// and whoami; the operator's name in every change, never from the body;
// the gateway's key cannot author an analyzer event, an unsigned one is
// refused, a replayed event and a wrong-subject deployment are refused,
// each counted by reason and named in note while the state holds; the
// analyzer's key can; and the key rotation of docs/security.md with
// `gateway rollout reaffirm`: after it, the old key's events no longer
// count and the state holds.
func TestE2ESignedRolloutLog(t *testing.T) {
	ns := testenv.StartNATS(t)
	nc, js := testenv.Connect(t, ns.URL)
	e := &signedEnv{t: t, nats: ns.URL, primary: testenv.StartMock(t).URL, gray: testenv.StartMock(t).URL,
		nc: nc, js: js, analyzer: newKey(t, "analyzer"), gw1: newKey(t, "gw1"), gw2: newKey(t, "gw2"), unwatched: "0s"}
	gw := e.start(signers([]key{e.analyzer}, e.gw1), e.gw1)

	// The config seed is signed by the gateway's key and counts.
	if r := entryOf(t, gw, "qwen"); r.Actor != "config" || r.Status != "active" || r.Revision == 0 || r.Note != "" {
		t.Fatalf("seeded entry = %+v; want active from config", r)
	}

	// whoami: each token names its operator; the shared one is "".
	for _, c := range []struct{ token, want string }{{aliceToken, "alice"}, {bobToken, "bob"}, {sharedToken, ""}} {
		code, b := adminAs(t, gw, c.token, http.MethodGet, "/admin/whoami", "")
		var who struct{ Operator *string }
		if code != 200 || json.Unmarshal(b, &who) != nil || who.Operator == nil || *who.Operator != c.want {
			t.Errorf("whoami with %s's token = %d %s; want operator %q", c.want, code, b, c.want)
		}
	}
	if code, _ := adminAs(t, gw, "not-a-token-of-anyone", http.MethodGet, "/admin/whoami", ""); code != 401 {
		t.Errorf("whoami with a wrong token = %d; want 401", code)
	}

	// An operator's change carries their name; the body cannot name one.
	code, b := adminAs(t, gw, aliceToken, http.MethodPut, "/admin/rollouts/qwen", `{"percentage": 5, "reason": "first step"}`)
	var put signedEntry
	if code != 200 || json.Unmarshal(b, &put) != nil || put.Operator != "alice" || put.Actor != "admin" {
		t.Fatalf("alice's PUT = %d %s; want 200 with operator alice", code, b)
	}
	testenv.WaitFor(t, 5*time.Second, "alice's change", func() bool { r := entryOf(t, gw, "qwen"); return r.Revision == put.Revision })
	if r := entryOf(t, gw, "qwen"); r.Operator != "alice" || r.Percentage != 5 {
		t.Errorf("after alice's change the entry is %+v; want 5 %% by alice", r)
	}
	if code, b := adminAs(t, gw, bobToken, http.MethodPut, "/admin/rollouts/qwen", `{"percentage": 6, "reason": "x", "operator": "alice"}`); code != 400 {
		t.Errorf("a PUT naming an operator in its body = %d %s; want 400", code, b)
	}
	aliceMsg, err := mustStream(t, js).GetMsg(context.Background(), put.Revision)
	testenv.Must(t, err)

	// Forgeries through the gateway's own key (what its NATS identity
	// holds), and unsigned or replayed messages, change nothing.
	subject := events.RolloutSubject("qwen")
	before := entryOf(t, gw, "qwen")
	rollback := func() *events.RolloutChanged {
		return &events.RolloutChanged{Deployment: "qwen", Status: events.StatusRolledBack, Reason: "forged", Actor: events.ActorAnalyzer}
	}
	prev := before.Revision
	for _, c := range []struct {
		name, reason string
		send         func() uint64
	}{
		{"an analyzer event signed by the gateway's key", "signer", func() uint64 {
			seq, _, _ := e.publishAs(e.gw1.kp, subject, rollback(), prev, true)
			return seq
		}},
		{"an unsigned analyzer event", "signature", func() uint64 {
			seq, _, _ := e.publishAs(nil, subject, rollback(), prev, true)
			return seq
		}},
		{"a signature over other bytes", "signature", func() uint64 {
			_, _, h := e.publishAs(e.analyzer.kp, "graygate.rollout.scratch", rollback(), 0, false)
			_, body, _ := e.publishAs(nil, "graygate.rollout.scratch", &events.RolloutChanged{Deployment: "qwen", Status: events.StatusRolledBack, Reason: "other", Actor: events.ActorAnalyzer}, prev, false)
			return e.republish(&nats.Msg{Subject: subject, Data: body, Header: h})
		}},
		{"another deployment's event signed by the analyzer", "deployment", func() uint64 {
			ev := rollback()
			ev.Deployment = "big"
			seq, _, _ := e.publishAs(e.analyzer.kp, subject, ev, prev, true)
			return seq
		}},
		{"alice's change published again", "replay", func() uint64 {
			return e.republish(&nats.Msg{Subject: subject, Data: aliceMsg.Data, Header: aliceMsg.Header})
		}},
		{"an analyzer event with a stale prev_revision", "replay", func() uint64 {
			seq, _, _ := e.publishAs(e.analyzer.kp, subject, rollback(), prev-1, false)
			return seq
		}},
	} {
		was := metric(t, gw, `graygate_rollout_invalid_events_total{reason="`+c.reason+`"}`)
		seq := c.send()
		testenv.WaitFor(t, 5*time.Second, c.name+" to be read", func() bool { return entryOf(t, gw, "qwen").Revision == seq })
		r := entryOf(t, gw, "qwen")
		if r.Status != "active" || r.Percentage != 5 || r.Operator != "alice" || r.Note == "" {
			t.Errorf("after %s the gateway serves %+v; want alice's 5 %% with a note", c.name, r)
		}
		if now := metric(t, gw, `graygate_rollout_invalid_events_total{reason="`+c.reason+`"}`); now == was {
			t.Errorf("after %s graygate_rollout_invalid_events_total{reason=%q} stayed at %s", c.name, c.reason, now)
		}
		t.Logf("%s: refused (%s): %s", c.name, c.reason, r.Note)
		prev = seq
	}

	// The analyzer's key authors analyzer events, appended after the last
	// message whatever it was.
	seq, _, _ := e.publishAs(e.analyzer.kp, subject, &events.RolloutChanged{Deployment: "qwen", Percentage: 10,
		Status: events.StatusActive, Reason: "promoted", Actor: events.ActorAnalyzer}, prev, true)
	testenv.WaitFor(t, 5*time.Second, "the analyzer's event", func() bool {
		r := entryOf(t, gw, "qwen")
		return r.Revision == seq && r.Percentage == 10 && r.Actor == "analyzer" && r.Note == ""
	})

	// Bob's change, signed with the gateway's first key.
	code, b = adminAs(t, gw, bobToken, http.MethodPut, "/admin/rollouts/qwen", `{"percentage": 20, "reason": "bob's step"}`)
	if code != 200 || !strings.Contains(string(b), `"operator":"bob"`) {
		t.Fatalf("bob's PUT = %d %s", code, b)
	}
	testenv.WaitFor(t, 5*time.Second, "bob's change", func() bool { return entryOf(t, gw, "qwen").Percentage == 20 })

	// Key rotation (docs/security.md): add the new key, re-affirm with it,
	// remove the old one.
	gw = e.start(signers([]key{e.analyzer}, e.gw1, e.gw2), e.gw2)
	for _, d := range []string{"qwen", "big"} {
		code, out, errs := rolloutCLI(t, gw, aliceToken, "reaffirm", d, "--reason", "rotate to gw2", "--json")
		var v signedEntry
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Operator != "alice" || v.Actor != "admin" {
			t.Fatalf("rollout reaffirm %s = %d\n%s%s", d, code, out, errs)
		}
	}
	gw = e.start(signers([]key{e.analyzer}, e.gw2), e.gw2)
	r := entryOf(t, gw, "qwen")
	if r.Percentage != 20 || r.Status != "active" || r.Operator != "alice" || r.Reason != "rotate to gw2" || r.Note != "" {
		t.Errorf("after the rotation the gateway serves %+v; want bob's 20 %% re-affirmed by alice", r)
	}
	if r := entryOf(t, gw, "big"); r.Status != "active" || r.Reason != "rotate to gw2" {
		t.Errorf("after the rotation big is %+v; want its seed re-affirmed", r)
	}
	// The old key's events no longer count.
	seq, _, _ = e.publishAs(e.gw1.kp, subject, &events.RolloutChanged{Deployment: "qwen", Percentage: 50,
		Status: events.StatusActive, Reason: "old key", Actor: events.ActorAdmin}, r.Revision, true)
	testenv.WaitFor(t, 5*time.Second, "the old key's event to be read", func() bool { return entryOf(t, gw, "qwen").Revision == seq })
	if r := entryOf(t, gw, "qwen"); r.Percentage != 20 || !strings.Contains(r.Note, "rollout_signers") {
		t.Errorf("after an event signed with the removed key the gateway serves %+v; want 20 %% and a note", r)
	}
	if strings.Contains(gw.Stderr(), aliceToken) || strings.Contains(gw.Stderr(), bobToken) {
		t.Error("an operator's token appears in the gateway's log")
	}

	// A subject with messages but none valid is served primary only and
	// said so; the config's seed is not appended again: here big's events
	// are all signed by keys no longer listed.
	gw3 := newKey(t, "gw3")
	gw = e.start(signers([]key{e.analyzer}, gw3), gw3)
	if r := entryOf(t, gw, "big"); r.Status != "" || r.Note == "" || !r.Known {
		t.Errorf("big with no valid event: %+v; want no status and a note", r)
	}
	if r := entryOf(t, gw, "qwen"); r.Percentage != 10 || r.Actor != "analyzer" {
		t.Errorf("qwen with only the analyzer's events valid: %+v; want the analyzer's 10 %%", r)
	}
	if v := metric(t, gw, "graygate_rollout_no_valid_event"); v != "1" {
		t.Errorf("graygate_rollout_no_valid_event = %q; want 1", v)
	}
	resp, err := http.Get(gw.Admin + "/readyz")
	testenv.Must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "no valid rollout event for big") {
		t.Errorf("/readyz = %d %q; want 200 naming big", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"big-chat","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Gray-Rollout", "true")
	resp, err = http.DefaultClient.Do(req)
	testenv.Must(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if arm := resp.Header.Get("x-gateway-arm"); resp.StatusCode != 200 || arm != "primary" {
		t.Errorf("big with no valid event served %d by %q; want primary", resp.StatusCode, arm)
	}
}

func mustStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	s, err := js.Stream(context.Background(), events.StreamRollout)
	testenv.Must(t, err)
	return s
}

// TestE2EUnwatchedGrayHold: a gateway that sees no valid analyzer
// heartbeat for gray_unwatched_after serves the grays at or below
// unwatched_hold_above primary only and keeps the share of those above
// (SPEC §11 rev. 4), says so in /readyz (200), graygate_gray_unwatched and
// its log, ignores heartbeats signed by a gateway's key, and serves the
// shares again only once heartbeats have been back for
// unwatched_recover_after (2 s here, 30 s by default).
func TestE2EUnwatchedGrayHold(t *testing.T) {
	ns := testenv.StartNATS(t)
	nc, js := testenv.Connect(t, ns.URL)
	e := &signedEnv{t: t, nats: ns.URL, primary: testenv.StartMock(t).URL, gray: testenv.StartMock(t).URL,
		nc: nc, js: js, analyzer: newKey(t, "analyzer"), gw1: newKey(t, "gw1"), unwatched: "1s"}

	// Heartbeats every 100 ms, signed by the analyzer's key (beating) or
	// by the gateway's (forged, ignored).
	var beating, forged atomic.Bool
	beating.Store(true)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for ctx.Err() == nil {
			for _, k := range []struct {
				on *atomic.Bool
				kp nkeys.KeyPair
			}{{&beating, e.analyzer.kp}, {&forged, e.gw1.kp}} {
				if !k.on.Load() {
					continue
				}
				body, _ := json.Marshal(events.Heartbeat{Holder: "analyzer/test", Time: time.Now().UTC()})
				h, _ := events.Sign(k.kp, body)
				_ = nc.PublishMsg(&nats.Msg{Subject: events.SubjectHeartbeat, Data: body, Header: h})
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	gw := e.start(signers([]key{e.analyzer}, e.gw1), e.gw1)
	for d, pct := range map[string]string{"qwen": "10", "big": "50"} {
		if code, b := adminAs(t, gw, aliceToken, http.MethodPut, "/admin/rollouts/"+d, `{"percentage": `+pct+`, "reason": "r"}`); code != 200 {
			t.Fatalf("PUT %s = %d %s", d, code, b)
		}
	}
	testenv.WaitFor(t, 5*time.Second, "the shares", func() bool {
		return entryOf(t, gw, "qwen").Percentage == 10 && entryOf(t, gw, "big").Percentage == 50
	})
	grays := func(model string) int {
		n := 0
		for i := range 60 {
			req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"`+model+`","user":"u`+fmt.Sprint(i)+`","messages":[{"role":"user","content":"hi"}]}`))
			resp, err := http.DefaultClient.Do(req)
			testenv.Must(t, err)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Header.Get("x-gateway-arm") == "gray" {
				n++
			}
		}
		return n
	}
	readyz := func() (int, string) {
		resp, err := http.Get(gw.Admin + "/readyz")
		testenv.Must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	time.Sleep(1500 * time.Millisecond) // longer than gray_unwatched_after, with heartbeats
	if code, body := readyz(); code != 200 || strings.Contains(body, "unwatched") || metric(t, gw, "graygate_gray_unwatched") != "0" {
		t.Fatalf("watched: /readyz = %d %q, gauge %s", code, body, metric(t, gw, "graygate_gray_unwatched"))
	}
	if g := grays("agent-chat"); g == 0 {
		t.Errorf("watched: 0 of 60 requests at 10 %% went gray")
	}

	// The analyzer falls silent; only forged heartbeats arrive.
	beating.Store(false)
	forged.Store(true)
	testenv.WaitFor(t, 5*time.Second, "the unwatched hold", func() bool { return metric(t, gw, "graygate_gray_unwatched") == "1" })
	if code, body := readyz(); code != 200 || !strings.Contains(body, "degraded") || !strings.Contains(body, "unwatched") {
		t.Errorf("unwatched: /readyz = %d %q; want 200 degraded, unwatched grays", code, body)
	}
	if g := grays("agent-chat"); g != 0 {
		t.Errorf("unwatched: %d of 60 requests at 10 %% went gray; want 0", g)
	}
	if g := grays("big-chat"); g == 0 {
		t.Errorf("unwatched: 0 of 60 requests at 50 %% went gray; the share above unwatched_hold_above is kept")
	}
	if !strings.Contains(gw.Stderr(), "no analyzer heartbeat") {
		t.Error("the gateway did not log the hold")
	}

	// Heartbeats come back: the hold stays for unwatched_recover_after.
	beating.Store(true)
	back := time.Now()
	time.Sleep(800 * time.Millisecond)
	if metric(t, gw, "graygate_gray_unwatched") != "1" {
		t.Errorf("the hold ended %s after heartbeats came back; want 2 s", time.Since(back).Round(time.Millisecond))
	}
	testenv.WaitFor(t, 5*time.Second, "the hold to end", func() bool { return metric(t, gw, "graygate_gray_unwatched") == "0" })
	if took := time.Since(back); took < 2*time.Second {
		t.Errorf("the hold ended %s after heartbeats came back; want at least 2 s", took)
	}
	if code, body := readyz(); code != 200 || strings.Contains(body, "unwatched") {
		t.Errorf("watched again: /readyz = %d %q", code, body)
	}
	if g := grays("agent-chat"); g == 0 {
		t.Errorf("watched again: 0 of 60 requests at 10 %% went gray")
	}
}

// TestE2EAnalyzerSignsItsActs runs the real analyzer beside a signed
// gateway: its heartbeats keep the gateway's grays watched, its rollback
// of a gray that breaks its schema is signed with its key and applied,
// and once it stops, the gateway holds its grays (SPEC §7, §11 rev. 4).
func TestE2EAnalyzerSignsItsActs(t *testing.T) {
	ns := testenv.StartNATS(t)
	nc, js := testenv.Connect(t, ns.URL)
	e := &signedEnv{t: t, nats: ns.URL, primary: testenv.StartMock(t).URL, gray: testenv.StartMock(t, "--content", "schema-break").URL,
		nc: nc, js: js, analyzer: newKey(t, "analyzer"), gw1: newKey(t, "gw1"), unwatched: "1s"}
	signerList := signers([]key{e.analyzer}, e.gw1)
	e.tmpl = strings.Replace(signedConfig, "rollout: {percentage: 0}\n  big:",
		"rollout: {percentage: 100, response_schema: schemas/contracts/agent-action.schema.json}\n  big:", 1) +
		"analyzer:\n  listen: " + testenv.FreeAddr(t) + "\n  interval: 300ms\n  window: 2m\n  signing_key_file: " + e.analyzer.file + "\n  spool_dir: " + t.TempDir() + "\n"
	cfg := strings.NewReplacer("{{NATS}}", e.nats, "{{PRIMARY}}", e.primary, "{{GRAY}}", e.gray,
		"{{SPOOL}}", t.TempDir(), "{{SIGNERS}}", signerList, "{{KEY}}", e.gw1.file, "{{UNWATCHED}}", e.unwatched,
		"{{LISTEN}}", testenv.FreeAddr(t), "{{ADMIN}}", testenv.FreeAddr(t)).Replace(e.tmpl)
	an, _ := testenv.Start(t, testenv.Binary(t, "./analyzer"), []string{"NATS_URL="}, "analyzer listening on ", "serve", "--config", writeConfig(t, cfg))

	gw := e.start(signerList, e.gw1)
	if r := entryOf(t, gw, "qwen"); r.Percentage != 100 {
		t.Fatalf("qwen = %+v; want the config's 100 %%", r)
	}
	time.Sleep(1500 * time.Millisecond) // past gray_unwatched_after
	if v := metric(t, gw, "graygate_gray_unwatched"); v != "0" {
		t.Fatalf("with the analyzer running graygate_gray_unwatched = %q; want 0", v)
	}
	// Gray breaks its schema while primary's answers pass: the analyzer
	// rolls it back, signed, and the gateway applies it.
	testenv.WaitFor(t, 60*time.Second, "the analyzer's rollback", func() bool {
		resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"agent-chat","messages":[{"role":"user","content":"hi"}]}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		r := entryOf(t, gw, "qwen")
		return r.Status == "rolled_back" && r.Actor == "analyzer"
	})
	if r := entryOf(t, gw, "qwen"); r.Note != "" {
		t.Errorf("after the analyzer's rollback: note %q", r.Note)
	}
	if v := metric(t, gw, `graygate_rollout_invalid_events_total{reason="signer"}`); v != "0" {
		t.Errorf("graygate_rollout_invalid_events_total{reason=\"signer\"} = %s; want 0", v)
	}
	if strings.Contains(an.Stderr(), "rollout_signers is empty") {
		t.Error("the analyzer warned about unsigned events")
	}

	// The analyzer stops: no heartbeat, the gateway holds its grays.
	_ = an.Cmd.Process.Kill()
	_ = an.Cmd.Wait()
	testenv.WaitFor(t, 5*time.Second, "the unwatched hold", func() bool { return metric(t, gw, "graygate_gray_unwatched") == "1" })
}
