package natsinfra_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Nothing is written through a reply subject that could not be written
// directly (SPEC §11 rev. 4). As every identity of the shipped
// configuration, the attack sends every request the identity may make —
// each subject of its publish allow list, with the bodies that make the
// server answer (an empty one, a pull, an ack that asks for more) — with
// its reply subject set to each subject of each stream and bucket, and to
// each name an account gives them (import, mapping, export, the JetStream
// API prefix). Then every stream and bucket the identity cannot publish to
// directly must hold the same messages, and the analyzer's lease the same
// revision; no stream is deleted or purged; and the analyzer's statistics
// consumer keeps its ack floor through the others' attacks.
//
// GRAYGATE_ATTACK_CONF names another server configuration to attack on
// one in-process server, or one of the binary GRAYGATE_ATTACK_BIN
// (GRAYGATE_ATTACK_API_PREFIX its services' API prefix, empty for
// $JS.API): the rev. 3 configuration of a single account fails it.

// identity is one user of the configuration, as the attack sees it.
type identity struct {
	name, password, account string
	publish                 []string // its publish allow list
}

// layout is what the attack reads from the configuration: identities,
// and every subject name an account gives (imports, mappings, exports).
type layout struct {
	identities []identity
	names      []string
}

func asStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, fmt.Sprint(e))
		}
		return out
	}
	return nil
}

func mapAt(v any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	m, _ := v.(map[string]any)
	return m
}

// readLayout parses path (its variables already in the environment).
func readLayout(t *testing.T, path string) layout {
	t.Helper()
	top, err := conf.ParseFile(path)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var l layout
	addUsers := func(account string, users any) {
		for _, u := range asList(users) {
			m, _ := u.(map[string]any)
			l.identities = append(l.identities, identity{
				name: fmt.Sprint(m["user"]), password: fmt.Sprint(m["password"]), account: account,
				publish: asStrings(mapAt(m, "permissions", "publish")["allow"]),
			})
		}
	}
	addUsers("", mapAt(top, "authorization")["users"])
	for acc, a := range mapAt(top, "accounts") {
		am, _ := a.(map[string]any)
		addUsers(acc, am["users"])
		for _, imp := range asList(am["imports"]) {
			m, _ := imp.(map[string]any)
			for _, kind := range []string{"service", "stream"} {
				if sub := mapAt(m, kind); sub != nil {
					l.names = append(l.names, fmt.Sprint(sub["subject"]))
				}
			}
			if to, ok := m["to"]; ok {
				l.names = append(l.names, fmt.Sprint(to))
			}
		}
		for _, exp := range asList(am["exports"]) {
			m, _ := exp.(map[string]any)
			for _, kind := range []string{"service", "stream"} {
				if s, ok := m[kind]; ok {
					l.names = append(l.names, fmt.Sprint(s))
				}
			}
		}
		for from, to := range mapAt(am, "mappings") {
			l.names = append(l.names, from, fmt.Sprint(to))
		}
	}
	sort.Slice(l.identities, func(i, j int) bool { return l.identities[i].name < l.identities[j].name })
	return l
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// concrete turns a subject pattern into subjects a message may be sent
// on: '*' becomes a token, and '>' each tail in tails (or "qwen").
func concrete(pattern string, tails ...string) []string {
	tokens := strings.Split(pattern, ".")
	for i, tok := range tokens {
		if tok == "*" {
			tokens[i] = "qwen"
		}
	}
	p := strings.Join(tokens, ".")
	if !strings.HasSuffix(p, ".>") {
		return []string{p}
	}
	if len(tails) == 0 {
		tails = []string{"qwen"}
	}
	var out []string
	for _, tl := range tails {
		out = append(out, strings.TrimSuffix(p, ">")+tl)
	}
	return out
}

// ackTail is the tail of an acknowledgement subject of the first message
// delivered once ($JS.ACK.<stream>.<consumer>.<tail>).
const ackTail = "1.1.1.1700000000000000000.0"

// requestsOf is every request the identity may make: each subject of its
// allow list with the bodies that make the server answer.
func requestsOf(id identity) []request {
	var out []request
	for _, p := range id.publish {
		var tails []string
		bodies := [][]byte{nil}
		switch {
		case strings.HasPrefix(p, "$JS.ACK."):
			tails = []string{ackTail}
			bodies = [][]byte{nil, []byte("+ACK"), []byte(`+NXT {"batch":5,"expires":300000000}`), []byte("-NAK"), []byte("+WPI"), []byte("+TERM")}
		case strings.Contains(p, "DIRECT.GET."):
			tails = []string{"graygate.rollout.qwen", "$KV.graygate_analyzer.leader", "$KV.graygate_analyzer_epochs.qwen"}
		case strings.Contains(p, ".$KV."):
			tails = []string{"attack"}
		case strings.Contains(p, "CONSUMER.MSG.NEXT."):
			bodies = [][]byte{nil, []byte(`{"batch":5,"expires":300000000}`), []byte(`{"batch":5,"no_wait":true}`)}
		case strings.HasPrefix(p, "graygate."):
			bodies = [][]byte{[]byte("{}")}
		}
		for _, subj := range concrete(p, tails...) {
			for _, b := range bodies {
				out = append(out, request{subj, b})
			}
		}
	}
	return out
}

type request struct {
	subject string
	body    []byte
}

// streamState is what changes when a message is added to or removed from
// a stream, or the stream is deleted.
type streamState struct {
	lastSeq, msgs uint64
	missing       bool
}

// watched are the streams and buckets the attack watches.
var watched = []string{events.StreamEvents, events.StreamStats, events.StreamRollout, events.StreamAnalysis,
	events.StreamPools, "KV_graygate_analyzer", "KV_" + epochBucket}

// mayWrite is what SPEC §7 lets each service identity publish to.
var mayWrite = map[string][]string{
	"gateway":   {events.StreamEvents, events.StreamStats, events.StreamRollout, events.StreamPools},
	"analyzer":  {events.StreamRollout, events.StreamAnalysis, "KV_graygate_analyzer", "KV_" + epochBucket},
	"collector": {},
}

// replySubjects are the subjects the attack names as replies: each
// stream's and bucket's subjects, the keys that matter (the lease), and
// every name the configuration gives a subject, with tails that reach
// the same keys.
func replySubjects(l layout, apiPrefix string) []string {
	set := map[string]bool{}
	add := func(s ...string) {
		for _, x := range s {
			set[x] = true
		}
	}
	for _, c := range events.StreamConfigs(1) {
		for _, s := range c.Subjects {
			add(concrete(s)...)
		}
		if c.RePublish != nil {
			add(concrete(c.RePublish.Destination)...)
		}
	}
	kv := []string{"$KV.graygate_analyzer.leader", "$KV.graygate_analyzer.qwen", "$KV." + epochBucket + ".qwen"}
	add(kv...)
	if apiPrefix != "" {
		for _, k := range kv {
			add(apiPrefix + "." + k)
		}
	}
	for _, n := range l.names {
		add(concrete(n, "qwen", "leader")...)
	}
	// JetStream's own subjects: another's acknowledgement, and requests
	// no identity may make (a purge, a delete).
	add("$JS.ACK."+events.StreamStats+"."+analyzerStats+"."+ackTail,
		"$JS.API.STREAM.PURGE."+events.StreamRollout, "$JS.API.STREAM.MSG.DELETE."+events.StreamRollout,
		"$JS.API.STREAM.DELETE.KV_graygate_analyzer")
	if apiPrefix != "" {
		add(apiPrefix+".STREAM.PURGE."+events.StreamRollout, apiPrefix+".STREAM.DELETE.KV_graygate_analyzer")
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// attackResult counts one attack.
type attackResult struct {
	requests, replies, sent int
	changed                 []string // "<identity>: <stream> …" for streams it may not write that changed
	leaseMoved              []string
	otherConsumer           []string // another identity's consumer acknowledged
}

// attack runs the reply-subject attack on srv with the configuration at
// confPath as every identity it defines.
func attack(t *testing.T, srv *shippedServer, confPath, apiPrefix string) attackResult {
	t.Helper()
	l := readLayout(t, confPath)
	if len(l.identities) == 0 {
		t.Fatalf("%s defines no identity", confPath)
	}
	n := srv.secure()
	dial := func(id identity) *conn {
		cfg := config.NATS{URL: n.url, User: id.name, Password: config.Secret(id.password), TLS: config.NATSTLS{CAFile: n.ca}, APIPrefix: apiPrefix}
		opts, err := cfg.ConnectOptions()
		if err != nil {
			t.Fatal(err)
		}
		c := &conn{}
		opts = append(opts, nats.CustomInboxPrefix("_INBOX_"+id.name), nats.Timeout(3*time.Second), nats.MaxReconnects(-1),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		c.nc, err = nats.Connect(n.url, opts...)
		if err != nil {
			t.Fatalf("%s connects: %v", id.name, err)
		}
		t.Cleanup(c.nc.Close)
		if c.js, err = cfg.JetStream(c.nc); err != nil {
			t.Fatal(err)
		}
		return c
	}
	conns := map[string]*conn{}
	for _, id := range l.identities {
		conns[id.name] = dial(id)
	}
	an, gw, col := conns["analyzer"], conns["gateway"], conns["collector"]
	if an == nil || gw == nil || col == nil {
		t.Fatalf("%s lacks one of the service identities gateway, analyzer, collector", confPath)
	}

	// The services' state as they run: streams, the analyzer's lease and
	// checkpoint, every consumer, a message in every stream.
	replicas := len(srv.urls)
	var err error
	for i := 0; ; i++ { // a cluster elects its JetStream leader first
		// Each service its own streams, as they start.
		for _, name := range []string{"gateway", "analyzer", "collector"} {
			if err = events.EnsureStreams(ctxT(t, 5*time.Second), conns[name].js, replicas, nil, ownStreams[name]...); err != nil {
				err = fmt.Errorf("the %s's streams: %w", name, err)
				break
			}
		}
		if err == nil || i == 20 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	lease, err := an.js.CreateKeyValue(ctxT(t, 5*time.Second), jetstream.KeyValueConfig{Bucket: "graygate_analyzer", History: 1, Replicas: replicas})
	if err != nil {
		t.Fatalf("the lease bucket: %v", err)
	}
	if _, err := lease.Create(ctxT(t, 2*time.Second), "leader", []byte("analyzer/holder")); err != nil {
		t.Fatalf("the lease: %v", err)
	}
	cps, err := an.js.CreateKeyValue(ctxT(t, 5*time.Second), jetstream.KeyValueConfig{Bucket: epochBucket, History: 1, Replicas: replicas})
	if err != nil {
		t.Fatalf("the checkpoint bucket: %v", err)
	}
	if _, err := cps.Put(ctxT(t, 2*time.Second), "qwen", []byte(`{"version":1}`)); err != nil {
		t.Fatalf("a checkpoint: %v", err)
	}
	for i := 0; i < 3; i++ {
		for _, subj := range []string{events.RequestSubject("qwen"), events.StatsSubject("qwen"), events.RolloutSubject("qwen"), events.ReplicasSubject("qwen")} {
			if _, err := gw.js.Publish(ctxT(t, 2*time.Second), subj, []byte("{}")); err != nil {
				t.Fatalf("gateway publishes on %s: %v", subj, err)
			}
		}
		if _, err := an.js.Publish(ctxT(t, 2*time.Second), events.AnalysisSubject("qwen"), []byte("{}")); err != nil {
			t.Fatalf("analyzer publishes an analysis: %v", err)
		}
	}
	if _, err := an.js.CreateOrUpdateConsumer(ctxT(t, 5*time.Second), events.StreamStats, analyzerConsumer(analyzerStats)); err != nil {
		t.Fatalf("analyzer's consumer: %v", err)
	}
	for _, stream := range collectorStreams {
		if _, err := col.js.CreateOrUpdateConsumer(ctxT(t, 5*time.Second), stream, collectorConsumer(stream)); err != nil {
			t.Fatalf("collector's consumer on %s: %v", stream, err)
		}
	}

	snapshot := func() map[string]streamState {
		out := map[string]streamState{}
		for _, name := range watched {
			s, err := an.js.Stream(ctxT(t, 5*time.Second), name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				out[name] = streamState{missing: true}
				continue
			}
			if err != nil {
				t.Fatalf("info of %s: %v", name, err)
			}
			st := s.CachedInfo().State
			out[name] = streamState{lastSeq: st.LastSeq, msgs: st.Msgs}
		}
		return out
	}
	leaseRev := func() uint64 {
		e, err := lease.Get(ctxT(t, 5*time.Second), "leader")
		if err != nil {
			return 0 // gone: not the revision it was
		}
		return e.Revision()
	}

	replies := replySubjects(l, apiPrefix)
	var res attackResult
	res.replies = len(replies)
	for _, id := range l.identities {
		c := conns[id.name]
		reqs := requestsOf(id)
		res.requests += len(reqs)
		may, known := mayWrite[id.name]
		if !known {
			t.Errorf("identity %q is not one of SPEC §7's; the attack holds it to writing nothing", id.name)
		}
		// The analyzer's own requests include deleting its consumer.
		if _, err := an.js.CreateOrUpdateConsumer(ctxT(t, 5*time.Second), events.StreamStats, analyzerConsumer(analyzerStats)); err != nil {
			t.Fatalf("analyzer's consumer: %v", err)
		}
		before, rev := snapshot(), leaseRev()
		floorBefore := ackFloor(t, an)
		for _, r := range reqs {
			for _, reply := range replies {
				if err := c.nc.PublishMsg(&nats.Msg{Subject: r.subject, Reply: reply, Data: r.body}); err != nil {
					t.Fatalf("%s sends %s: %v", id.name, r.subject, err)
				}
				res.sent++
			}
			_ = c.nc.Flush()
		}
		_ = c.nc.Flush()
		time.Sleep(1500 * time.Millisecond) // pulls expire after 300 ms; answers arrive
		after := snapshot()
		if id.name != "analyzer" {
			if f := ackFloor(t, an); f != floorBefore {
				res.otherConsumer = append(res.otherConsumer, fmt.Sprintf("%s: the analyzer's consumer's ack floor moved from %d to %d", id.name, floorBefore, f))
			}
		}
		for _, name := range watched {
			b, a := before[name], after[name]
			// Nobody may delete or purge a stream, its writers included
			// (a bucket's writer replaces its entries: fewer messages
			// there are its own doing).
			shrunk := a.msgs < b.msgs && !(slices.Contains(may, name) && strings.HasPrefix(name, "KV_"))
			if (a.missing && !b.missing) || shrunk {
				res.changed = append(res.changed, fmt.Sprintf("%s: %s deleted or purged (%+v, was %+v)", id.name, name, a, b))
				continue
			}
			if slices.Contains(may, name) {
				continue
			}
			if before[name] != after[name] {
				res.changed = append(res.changed, fmt.Sprintf("%s: %s from %+v to %+v", id.name, name, before[name], after[name]))
			}
		}
		if id.name != "analyzer" {
			if now := leaseRev(); now != rev {
				res.leaseMoved = append(res.leaseMoved, fmt.Sprintf("%s: lease revision %d → %d", id.name, rev, now))
			}
		}
		t.Logf("%s: %d requests × %d reply subjects", id.name, len(reqs), len(replies))
	}
	return res
}

// ackFloor is the stream sequence up to which the analyzer's statistics
// consumer has acknowledged.
func ackFloor(t *testing.T, an *conn) uint64 {
	t.Helper()
	c, err := an.js.Consumer(ctxT(t, 5*time.Second), events.StreamStats, analyzerStats)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("the analyzer's consumer: %v", err)
	}
	return c.CachedInfo().AckFloor.Stream
}

// checkDirectWrites checks that each service identity stores exactly in
// the streams SPEC §7 lets it publish to, so the attack's allowance is
// the identity's own right, not a hole.
func checkDirectWrites(t *testing.T, srv *shippedServer, confPath, apiPrefix string) {
	t.Helper()
	l := readLayout(t, confPath)
	n := srv.secure()
	for _, id := range l.identities {
		cfg := config.NATS{URL: n.url, User: id.name, Password: config.Secret(id.password), TLS: config.NATSTLS{CAFile: n.ca}, APIPrefix: apiPrefix}
		opts, _ := cfg.ConnectOptions()
		nc, err := nats.Connect(n.url, append(opts, nats.CustomInboxPrefix("_INBOX_"+id.name), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
		if err != nil {
			t.Fatalf("%s connects: %v", id.name, err)
		}
		var (
			mu     sync.Mutex
			wg     sync.WaitGroup
			stored = map[string]bool{}
		)
		for _, subj := range replySubjects(l, apiPrefix) {
			// Every name of a stream's or bucket's subject; not the API.
			if strings.HasPrefix(subj, "$JS.") || (strings.Contains(subj, ".API.") && !strings.Contains(subj, "$KV.")) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg, err := nc.Request(subj, []byte("probe"), 500*time.Millisecond)
				if err != nil {
					return
				}
				var ack struct {
					Stream string `json:"stream"`
					Seq    uint64 `json:"seq"`
				}
				if json.Unmarshal(msg.Data, &ack) == nil && ack.Stream != "" && ack.Seq > 0 {
					mu.Lock()
					stored[ack.Stream] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		nc.Close()
		for _, name := range watched {
			if want := slices.Contains(mayWrite[id.name], name); stored[name] != want {
				t.Errorf("%s stores directly in %s: %v; SPEC §7 says %v", id.name, name, stored[name], want)
			}
		}
	}
}

func TestNoWritesThroughReplySubjects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-servers")
	}
	if other := os.Getenv("GRAYGATE_ATTACK_CONF"); other != "" {
		prefix := os.Getenv("GRAYGATE_ATTACK_API_PREFIX")
		var srv *shippedServer
		if bin := os.Getenv("GRAYGATE_ATTACK_BIN"); bin != "" {
			srv = startBinary(t, needBinary(t, bin), 1, other)
		} else {
			srv = startInProcess(t, other, 1)
		}
		res := attack(t, srv, other, prefix)
		t.Logf("%s on nats-server %s: %d requests × %d reply subjects = %d sent; changed without the right: %d streams, lease moved %d times",
			other, srv.version, res.requests, res.replies, res.sent, len(res.changed), len(res.leaseMoved))
		for _, c := range append(res.changed, res.leaseMoved...) {
			t.Error(c)
		}
		return
	}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *shippedServer
	}{
		{"newest_in-process_single", func(t *testing.T) *shippedServer { return startInProcess(t, "nats-server.conf", 1) }},
		{"newest_in-process_cluster3", func(t *testing.T) *shippedServer { return startInProcess(t, "cluster.conf", 3) }},
		{"v2.9_binary_single", func(t *testing.T) *shippedServer {
			return startBinary(t, needBinary(t, system29), 1, "nats-server.conf")
		}},
		{"v2.9_binary_cluster3", func(t *testing.T) *shippedServer { return startBinary(t, needBinary(t, system29), 3, "cluster.conf") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.start(t)
			// cluster.conf holds the same identities (accounts.conf).
			res := attack(t, srv, "nats-server.conf", apiPrefix)
			checkDirectWrites(t, srv, "nats-server.conf", apiPrefix)
			t.Logf("nats-server %s, %d node(s): %d requests × %d reply subjects = %d sent; changed without the right: %d, lease moved: %d",
				srv.version, len(srv.urls), res.requests, res.replies, res.sent, len(res.changed), len(res.leaseMoved))
			for _, c := range append(res.changed, res.leaseMoved...) {
				t.Error(c)
			}
			for _, c := range res.otherConsumer {
				t.Error(c) // not a stream write, but another identity's consumer
			}
		})
	}
}
