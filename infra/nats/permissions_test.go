package natsinfra_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The shipped server configuration, run in-process with throwaway TLS
// certificates and passwords: every service works with its own identity
// and nothing more (SPEC §7 "Who may write").

type secureNATS struct {
	url       string
	ca        string
	passwords map[string]string
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// throwawayTLS writes a CA and a server certificate for 127.0.0.1 and
// localhost into dir and returns their paths.
func throwawayTLS(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	return throwawayTLSFor(t, dir, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// throwawayTLSFor is throwawayTLS with the certificate's extended key usages.
func throwawayTLSFor(t *testing.T, dir string, usages ...x509.ExtKeyUsage) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "graygate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost", "nats"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		// Both by default, as make-dev-certs.sh's: a node of a cluster
		// dials its routes with the same certificate.
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	writePEM(t, ca, "CERTIFICATE", caDER)
	writePEM(t, cert, "CERTIFICATE", srvDER)
	writePEM(t, key, "EC PRIVATE KEY", keyDER)
	return ca, cert, key
}

// randomSecret starts with a letter: nats-server 2.9 reads a variable's
// value from the environment as a config value, so one that starts with
// a digit is taken for a number and the file does not load (README.md).
func randomSecret(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "s" + hex.EncodeToString(b)
}

// startSecureNATS runs infra/nats/nats-server.conf as shipped, on a free
// loopback port with a temporary store.
func startSecureNATS(t *testing.T) *secureNATS {
	t.Helper()
	s := startInProcess(t, "nats-server.conf", 1) // sets the variables the file reads
	opts, err := server.ProcessConfigFile("nats-server.conf")
	if err != nil {
		t.Fatalf("load nats-server.conf: %v", err)
	}
	if opts.HTTPPort != 0 || opts.HTTPSPort != 0 {
		t.Errorf("the shipped configuration exposes the monitoring port")
	}
	if opts.TLSConfig == nil {
		t.Fatal("the shipped configuration has no TLS")
	}
	if !opts.JetStream {
		t.Fatal("the shipped configuration has no JetStream")
	}
	return s.secure()
}

// conn is one service's connection, built the way the services build it
// (config.NATS.ConnectOptions), with the permission errors it was sent.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu    sync.Mutex
	perms []string
}

func (c *conn) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.perms...)
}

func (n *secureNATS) connect(t *testing.T, user, password string) (*conn, error) {
	t.Helper()
	cfg := config.NATS{URL: n.url, User: user, Password: config.Secret(password), TLS: config.NATSTLS{CAFile: n.ca}, APIPrefix: apiPrefix}
	opts, err := cfg.ConnectOptions()
	if err != nil {
		return nil, err
	}
	c := &conn{}
	if svc, ok := services[user]; ok {
		opts = append(opts, nats.CustomInboxPrefix(config.InboxPrefix(svc)))
	}
	opts = append(opts, nats.Timeout(3*time.Second), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.mu.Lock()
				c.perms = append(c.perms, err.Error())
				c.mu.Unlock()
			}
		}))
	if user == "" {
		opts = []nats.Option{nats.RootCAs(n.ca), nats.Timeout(3 * time.Second), nats.MaxReconnects(0)}
	}
	c.nc, err = nats.Connect(n.url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(c.nc.Close)
	c.js, err = cfg.JetStream(c.nc)
	return c, err
}

// apiPrefix is where the shipped accounts put the JetStream API of the
// GRAYGATE account (the services' nats.api_prefix).
const apiPrefix = "JS.graygate.API"

// The consumer names nats-server.conf grants: the first analyzer's
// statistics consumer and the collector's durables.
const analyzerStats = "graygate_analyzer_0"

func analyzerConsumer(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: name, FilterSubject: events.SubjectStatsPrefix + "*",
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckAllPolicy}
}

// collectorStreams are the streams the collector consumes (SPEC §8, §7 rev. 4).
var collectorStreams = []string{events.StreamEvents, events.StreamStats, events.StreamRollout, events.StreamAnalysis, events.StreamPools}

func collectorConsumer(stream string) jetstream.ConsumerConfig {
	suffix := map[string]string{events.StreamEvents: "events", events.StreamStats: "stats",
		events.StreamRollout: "rollout", events.StreamAnalysis: "analysis", events.StreamPools: "pools"}[stream]
	return jetstream.ConsumerConfig{Durable: "graygate-collector-" + suffix, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckExplicitPolicy}
}

// services maps each identity to its service, whose inbox prefix it uses.
var services = map[string]config.Service{"gateway": config.ForGateway, "analyzer": config.ForAnalyzer, "collector": config.ForCollector}

func (n *secureNATS) service(t *testing.T, svc string) *conn {
	t.Helper()
	c, err := n.connect(t, svc, n.passwords[svc])
	if err != nil {
		t.Fatalf("%s connects with its own identity: %v", svc, err)
	}
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func publish(t *testing.T, c *conn, d events.Data, source string) error {
	t.Helper()
	_, _, err := events.Publish(ctxT(t, time.Second), c.js, source, d, time.Now())
	return err
}

func rollout(dep string, pct float64, status events.RolloutStatus, actor events.Actor) *events.RolloutChanged {
	return &events.RolloutChanged{Deployment: dep, Percentage: pct, Status: status, Reason: "test", Actor: actor}
}

// fold reads a deployment's messages in GRAYGATE_ROLLOUT by direct get,
// as the gateway and the analyzer do, and folds them with the shared rule
// (Apply, or Skip for a message that is not a valid rollout event): the
// state every gateway would serve and the revision the next append must
// expect.
func fold(t *testing.T, c *conn, dep string) events.RolloutState {
	t.Helper()
	s, err := c.js.Stream(ctxT(t, 2*time.Second), events.StreamRollout)
	if err != nil {
		t.Fatalf("stream info of GRAYGATE_ROLLOUT: %v", err)
	}
	st := events.RolloutState{Deployment: dep}
	for seq := uint64(1); ; {
		msg, err := s.GetMsg(ctxT(t, 2*time.Second), seq, jetstream.WithGetMsgSubject(events.RolloutSubject(dep)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return st
		}
		if err != nil {
			t.Fatalf("read the rollout log from %d: %v", seq, err)
		}
		env, v, err := events.DecodeEvent(msg.Data)
		if ev, ok := v.(*events.RolloutChanged); err == nil && ok && ev.Deployment == dep {
			st.Apply(msg.Sequence, env.Time, ev)
		} else {
			st.Skip(msg.Sequence, fmt.Sprintf("not a rollout event (%v)", err))
		}
		seq = msg.Sequence + 1
	}
}

// epochBucket is the analyzer's checkpoint bucket (analyzer/internal/epoch.DefaultBucket).
const epochBucket = "graygate_analyzer_epochs"

func TestShippedNATSPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	n := startSecureNATS(t)

	// Nobody without an identity, and no wrong password.
	if _, err := n.connect(t, "", ""); err == nil {
		t.Error("a client without credentials connected")
	}
	if _, err := n.connect(t, "gateway", "wrong"); err == nil {
		t.Error("a wrong password connected")
	}
	// TLS is required: a plain connection is refused.
	if nc, err := nats.Connect(strings.Replace(n.url, "tls://", "nats://", 1), nats.UserInfo("gateway", n.passwords["gateway"]), nats.Timeout(2*time.Second), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a plaintext connection was accepted")
	}

	gw, an, col := n.service(t, "gateway"), n.service(t, "analyzer"), n.service(t, "collector")
	// Every service makes sure its own streams exist at start
	// (create_test.go: and no other).
	for name, c := range map[string]*conn{"gateway": gw, "analyzer": an, "collector": col} {
		if err := events.EnsureStreams(ctxT(t, 5*time.Second), c.js, 1, nil, ownStreams[name]...); err != nil {
			t.Fatalf("%s: EnsureStreams: %v", name, err)
		}
	}

	const dep = "qwen-32k"
	t.Run("gateway", func(t *testing.T) {
		src := "gateway/test"
		for _, d := range []events.Data{
			&events.RequestRejected{RequestID: "r1", Route: "m", Code: events.RejectionCode("tool_step_limit_exceeded"), Detail: "x"},
			rollout(dep, 10, events.StatusActive, events.ActorAdmin),
		} {
			if err := publish(t, gw, d, src); err != nil {
				t.Errorf("gateway publishes %s: %v", d.EventType(), err)
			}
		}
		for _, subj := range []string{events.RequestSubject(dep), events.SampleSubject(dep), events.StatsSubject(dep), events.ReplicasSubject(dep)} {
			if _, err := gw.js.Publish(ctxT(t, time.Second), subj, []byte("{}")); err != nil {
				t.Errorf("gateway publishes on %s: %v", subj, err)
			}
		}
		if st := fold(t, gw, dep); st.Percentage != 10 || st.Status != events.StatusActive || st.Note != "" {
			t.Errorf("gateway reads GRAYGATE_ROLLOUT: %+v", st)
		}
		// Follows the log as the gateway does: a core subscription on
		// graygate.rollout.> tells it when to read by direct get.
		bell, err := gw.nc.SubscribeSync(events.SubjectRolloutAll)
		if err != nil {
			t.Fatal(err)
		}
		_ = gw.nc.Flush()
		if err := publish(t, gw, rollout(dep, 12, events.StatusActive, events.ActorAdmin), src); err != nil {
			t.Fatalf("gateway publishes a rollout change: %v", err)
		}
		if _, err := bell.NextMsg(2 * time.Second); err != nil {
			t.Errorf("gateway hears a rollout change: %v (violations %q)", err, gw.violations())
		}
		_ = bell.Unsubscribe()
		if st := fold(t, gw, dep); st.Percentage != 12 {
			t.Errorf("gateway reads the change by direct get: %+v", st)
		}
		// Not the analyzer's subjects, and no other stream's messages.
		if _, err := gw.js.Publish(ctxT(t, time.Second), events.AnalysisSubject(dep), []byte("{}")); err == nil {
			t.Error("gateway published an analysis event")
		}
		if _, err := gw.js.CreateConsumer(ctxT(t, time.Second), events.StreamEvents, jetstream.ConsumerConfig{Durable: "gw-snoop"}); err == nil {
			t.Error("gateway read GRAYGATE_EVENTS")
		}
	})

	t.Run("analyzer", func(t *testing.T) {
		src := "analyzer/test"
		if err := publish(t, an, rollout(dep, 0, events.StatusRolledBack, events.ActorAnalyzer), src); err != nil {
			t.Errorf("analyzer publishes a rollback: %v", err)
		}
		if _, err := an.js.Publish(ctxT(t, time.Second), events.AnalysisSubject(dep), []byte("{}")); err != nil {
			t.Errorf("analyzer publishes an analysis: %v", err)
		}
		// Reads GRAYGATE_STATS through its own consumer, as the analyzer
		// creates it (a filter: the CREATE.<stream>.<name>.<filter> form).
		cons, err := an.js.CreateOrUpdateConsumer(ctxT(t, 2*time.Second), events.StreamStats, analyzerConsumer(analyzerStats))
		if err != nil {
			t.Fatalf("analyzer consumes GRAYGATE_STATS: %v", err)
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			t.Fatalf("analyzer reads a statistic: %v", err)
		}
		if err := msg.DoubleAck(ctxT(t, 2*time.Second)); err != nil {
			t.Errorf("analyzer acks a statistic: %v", err)
		}
		if st := fold(t, an, dep); st.Status != events.StatusRolledBack {
			t.Errorf("analyzer reads GRAYGATE_ROLLOUT: %+v", st)
		}
		// Its lease bucket.
		kv, err := an.js.CreateKeyValue(ctxT(t, 2*time.Second), jetstream.KeyValueConfig{Bucket: "graygate_analyzer", TTL: time.Minute})
		if err != nil {
			t.Fatalf("analyzer creates its lease bucket: %v (violations %q)", err, an.violations())
		}
		if _, err := kv.Create(ctxT(t, time.Second), "leader", []byte("analyzer/test")); err != nil {
			t.Errorf("analyzer takes its lease: %v", err)
		}
		if e, err := kv.Get(ctxT(t, time.Second), "leader"); err != nil || string(e.Value()) != "analyzer/test" {
			t.Errorf("analyzer reads its lease: %v", err)
		}
		// Its checkpoint bucket (SPEC §9 rev. 3), as analyzer/internal/epoch
		// opens and uses it: created when missing, Put, Get.
		cps, err := an.js.CreateKeyValue(ctxT(t, 2*time.Second), jetstream.KeyValueConfig{Bucket: epochBucket, History: 1})
		if err != nil {
			t.Fatalf("analyzer creates its checkpoint bucket: %v (violations %q)", err, an.violations())
		}
		if _, err := an.js.KeyValue(ctxT(t, time.Second), epochBucket); err != nil {
			t.Errorf("analyzer opens its checkpoint bucket: %v", err)
		}
		if _, err := cps.Put(ctxT(t, time.Second), dep, []byte(`{"version":1}`)); err != nil {
			t.Errorf("analyzer writes a checkpoint: %v (violations %q)", err, an.violations())
		}
		if e, err := cps.Get(ctxT(t, time.Second), dep); err != nil || string(e.Value()) != `{"version":1}` {
			t.Errorf("analyzer reads its checkpoint: %v (violations %q)", err, an.violations())
		}
		// Not the gateway's subjects.
		if _, err := an.js.Publish(ctxT(t, time.Second), events.RequestSubject(dep), []byte("{}")); err == nil {
			t.Error("analyzer published a request event")
		}
		if _, err := an.js.Publish(ctxT(t, time.Second), events.StatsSubject(dep), []byte("{}")); err == nil {
			t.Error("analyzer published a statistic")
		}
		if _, err := an.js.Publish(ctxT(t, time.Second), events.ReplicasSubject(dep), []byte("{}")); err == nil {
			t.Error("analyzer published a replicas status")
		}
	})

	t.Run("the analyzer's heartbeat reaches the gateways, and only the analyzer's", func(t *testing.T) {
		// Core graygate.heartbeat (SPEC §11 rev. 4): ANALYZER exports it,
		// GATEWAY imports it; a gateway may not publish it.
		gw2 := n.service(t, "gateway")
		heard, err := gw.nc.SubscribeSync("graygate.heartbeat")
		if err != nil {
			t.Fatal(err)
		}
		_ = gw.nc.Flush()
		if err := an.nc.Publish("graygate.heartbeat", []byte("beat")); err != nil {
			t.Fatal(err)
		}
		_ = an.nc.Flush()
		if m, err := heard.NextMsg(2 * time.Second); err != nil || string(m.Data) != "beat" {
			t.Errorf("the gateway did not hear the analyzer's heartbeat: %v", err)
		}
		before := len(gw2.violations())
		_ = gw2.nc.Publish("graygate.heartbeat", []byte("forged"))
		_ = gw2.nc.Flush()
		if m, err := heard.NextMsg(300 * time.Millisecond); err == nil {
			t.Errorf("a gateway heard another gateway's heartbeat %q", m.Data)
		}
		if len(gw2.violations()) == before {
			t.Error("the server did not refuse a gateway's heartbeat")
		}
		_ = heard.Unsubscribe()
	})

	t.Run("gateways share the prefix index among themselves, and only they", func(t *testing.T) {
		// Core graygate.balance.<deployment> (SPEC §6.7 rev. 4): within
		// the GATEWAY account; no other account sees or writes it.
		gw2 := n.service(t, "gateway")
		heard, err := gw.nc.SubscribeSync("graygate.balance." + dep)
		if err != nil {
			t.Fatal(err)
		}
		_ = gw.nc.Flush()
		if err := gw2.nc.Publish("graygate.balance."+dep, []byte("entries")); err != nil {
			t.Fatal(err)
		}
		_ = gw2.nc.Flush()
		if m, err := heard.NextMsg(2 * time.Second); err != nil || string(m.Data) != "entries" {
			t.Errorf("a gateway did not hear another gateway's index entries: %v", err)
		}
		for name, c := range map[string]*conn{"analyzer": an, "collector": col} {
			before := len(c.violations())
			_ = c.nc.Publish("graygate.balance."+dep, []byte("forged"))
			_ = c.nc.Flush()
			if m, err := heard.NextMsg(300 * time.Millisecond); err == nil {
				t.Errorf("the gateway heard the %s's index entries %q", name, m.Data)
			}
			if len(c.violations()) == before {
				t.Errorf("the server did not refuse the %s's index entries", name)
			}
		}
		_ = heard.Unsubscribe()
	})

	t.Run("only the analyzer writes its checkpoints", func(t *testing.T) {
		// The bucket exists (the analyzer subtest made it).
		var refused sync.WaitGroup
		for name, c := range map[string]*conn{"gateway": gw, "collector": col} {
			refused.Go(func() {
				if _, err := c.js.Publish(ctxT(t, time.Second), "$KV."+epochBucket+"."+dep, []byte(`{"version":2}`)); err == nil {
					t.Errorf("the %s's identity wrote a checkpoint", name)
				}
			})
			refused.Go(func() {
				if _, err := c.js.KeyValue(ctxT(t, time.Second), epochBucket); err == nil {
					t.Errorf("the %s's identity opened the checkpoint bucket", name)
				}
			})
			refused.Go(func() {
				if msg, err := c.nc.Request("$JS.API.DIRECT.GET.KV_"+epochBucket+".$KV."+epochBucket+"."+dep, nil, 500*time.Millisecond); err == nil {
					t.Errorf("the %s's identity read a checkpoint: %.80q", name, msg.Data)
				}
			})
		}
		refused.Wait()
		kv, err := an.js.KeyValue(ctxT(t, time.Second), epochBucket)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := kv.Get(ctxT(t, time.Second), dep); err != nil || string(e.Value()) != `{"version":1}` {
			t.Errorf("the analyzer's checkpoint after the others' attempts: %v %v", e, err)
		}
		// The analyzer may not purge or delete it either.
		if err := an.js.DeleteKeyValue(ctxT(t, time.Second), epochBucket); err == nil {
			t.Error("the analyzer's identity deleted its checkpoint bucket")
		}
	})

	t.Run("collector", func(t *testing.T) {
		for _, stream := range collectorStreams {
			cons, err := col.js.CreateOrUpdateConsumer(ctxT(t, 2*time.Second), stream, collectorConsumer(stream))
			if err != nil {
				t.Errorf("collector consumes %s: %v", stream, err)
				continue
			}
			msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
			if err != nil {
				t.Errorf("collector reads %s: %v", stream, err)
				continue
			}
			if err := msg.DoubleAck(ctxT(t, 2*time.Second)); err != nil {
				t.Errorf("collector acks %s: %v", stream, err)
			}
		}
		var refused sync.WaitGroup
		for _, subj := range []string{events.RequestSubject(dep), events.StatsSubject(dep), events.AnalysisSubject(dep), events.ReplicasSubject(dep)} {
			refused.Go(func() {
				if _, err := col.js.Publish(ctxT(t, time.Second), subj, []byte("{}")); err == nil {
					t.Errorf("collector published on %s", subj)
				}
			})
		}
		refused.Wait()
	})

	t.Run("no identity may create or update another's consumer", func(t *testing.T) {
		// The analyzer's statistics consumer as it runs.
		stats, err := an.js.CreateOrUpdateConsumer(ctxT(t, 2*time.Second), events.StreamStats, analyzerConsumer(analyzerStats))
		if err != nil {
			t.Fatalf("analyzer creates its consumer: %v", err)
		}
		want := stats.CachedInfo().Config
		// The attack: rewrite its filter to a subject nothing
		// publishes on, so gray failures never reach the gates.
		silenced := analyzerConsumer(analyzerStats)
		silenced.FilterSubject = "graygate.stats.nothing-publishes-here"
		// Every attempt at once: a refused request waits out its timeout.
		var refused sync.WaitGroup
		unfiltered := silenced
		unfiltered.FilterSubject = ""
		unfiltered.DeliverPolicy = jetstream.DeliverNewPolicy
		// The raw API forms, with the name only in the body.
		body, _ := json.Marshal(map[string]any{"stream_name": events.StreamStats, "config": map[string]any{
			"durable_name": analyzerStats, "filter_subject": silenced.FilterSubject, "ack_policy": "all"}})
		for name, c := range map[string]*conn{"collector": col, "gateway": gw} {
			for what, cfg := range map[string]jetstream.ConsumerConfig{"": silenced, " (no filter)": unfiltered} {
				refused.Go(func() {
					if _, err := c.js.CreateOrUpdateConsumer(ctxT(t, time.Second), events.StreamStats, cfg); err == nil {
						t.Errorf("the %s's identity rewrote the analyzer's statistics consumer%s", name, what)
					}
				})
			}
			for _, subj := range []string{"$JS.API.CONSUMER.CREATE." + events.StreamStats, "$JS.API.CONSUMER.DURABLE.CREATE." + events.StreamStats + "." + analyzerStats} {
				refused.Go(func() {
					if msg, err := c.nc.Request(subj, body, 500*time.Millisecond); err == nil && !strings.Contains(string(msg.Data), `"error"`) {
						t.Errorf("the %s's identity updated the analyzer's consumer through %s: %s", name, subj, msg.Data)
					}
				})
			}
		}
		refused.Wait()
		got, err := an.js.Consumer(ctxT(t, 2*time.Second), events.StreamStats, analyzerStats)
		if err != nil {
			t.Fatalf("the analyzer's consumer: %v", err)
		}
		if cfg := got.CachedInfo().Config; cfg.FilterSubject != want.FilterSubject || cfg.DeliverPolicy != want.DeliverPolicy || cfg.AckPolicy != want.AckPolicy {
			t.Errorf("the analyzer's consumer is now filter %q deliver %v ack %v; want %q %v %v",
				cfg.FilterSubject, cfg.DeliverPolicy, cfg.AckPolicy, want.FilterSubject, want.DeliverPolicy, want.AckPolicy)
		}
		// Nor the collector's: not by the analyzer, not by the gateway.
		for name, c := range map[string]*conn{"analyzer": an, "gateway": gw} {
			for _, stream := range collectorStreams {
				refused.Go(func() {
					cfg := collectorConsumer(stream)
					cfg.FilterSubject = "graygate.nothing"
					if _, err := c.js.CreateOrUpdateConsumer(ctxT(t, time.Second), stream, cfg); err == nil {
						t.Errorf("the %s's identity rewrote the collector's consumer on %s", name, stream)
					}
				})
			}
		}
		// And no identity may delete, pull from or read another's.
		for name, c := range map[string]*conn{"collector": col, "gateway": gw} {
			refused.Go(func() {
				if err := c.js.DeleteConsumer(ctxT(t, time.Second), events.StreamStats, analyzerStats); err == nil {
					t.Errorf("the %s's identity deleted the analyzer's consumer", name)
				}
			})
			refused.Go(func() {
				if msg, err := c.nc.Request("$JS.API.CONSUMER.MSG.NEXT."+events.StreamStats+"."+analyzerStats, []byte(`{"batch":1,"no_wait":true}`), 500*time.Millisecond); err == nil {
					t.Errorf("the %s's identity pulled from the analyzer's consumer: %q %v", name, msg.Data, msg.Header)
				}
			})
		}
		refused.Wait()
	})

	t.Run("no identity reads another's inbox", func(t *testing.T) {
		// The collector pulls GRAYGATE_EVENTS; its deliveries arrive on
		// _INBOX_collector.…, which the gateway may not subscribe to —
		// nor to the shared _INBOX.> of old.
		before := len(gw.violations())
		var snooped []string
		var mu sync.Mutex
		for _, subj := range []string{"_INBOX.>", "_INBOX_collector.>", "_INBOX_analyzer.>", ">"} {
			_, err := gw.nc.Subscribe(subj, func(m *nats.Msg) {
				mu.Lock()
				snooped = append(snooped, m.Subject)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		_ = gw.nc.Flush()
		if err := publish(t, gw, &events.RequestRejected{RequestID: "r-inbox", Route: "m", Code: events.RejectionCode("tool_step_limit_exceeded"), Detail: "x"}, "gateway/test"); err != nil {
			t.Fatal(err)
		}
		cons, err := col.js.CreateOrUpdateConsumer(ctxT(t, 2*time.Second), events.StreamEvents, collectorConsumer(events.StreamEvents))
		if err != nil {
			t.Fatalf("collector consumes GRAYGATE_EVENTS: %v", err)
		}
		if _, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second)); err != nil {
			t.Fatalf("collector reads GRAYGATE_EVENTS: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		for _, subj := range snooped {
			if !strings.HasPrefix(subj, "_INBOX_gateway.") && !strings.HasPrefix(subj, events.SubjectRolloutPrefix) {
				t.Errorf("the gateway's identity received %s", subj)
			}
		}
		if got := len(gw.violations()) - before; got < 4 {
			t.Errorf("the server refused %d of the gateway's 4 subscriptions to other inboxes (violations %q)", got, gw.violations())
		}
	})

	t.Run("each stream is readable only by its consumers", func(t *testing.T) {
		readers := map[string][]string{ // stream → identities that read it
			events.StreamEvents:   {"collector"},
			events.StreamStats:    {"analyzer", "collector"},
			events.StreamRollout:  {"gateway", "analyzer", "collector"},
			events.StreamAnalysis: {"collector"},
			events.StreamPools:    {"collector"},
		}
		// Every attempt at once: a refused request waits out its timeout.
		var refused sync.WaitGroup
		for stream, rs := range readers {
			for name, c := range map[string]*conn{"gateway": gw, "analyzer": an, "collector": col} {
				if slices.Contains(rs, name) {
					continue
				}
				// Any consumer name, its own service's included.
				for _, cname := range []string{"snoop", analyzerStats, collectorConsumer(stream).Durable} {
					refused.Go(func() {
						if _, err := c.js.CreateConsumer(ctxT(t, 500*time.Millisecond), stream, jetstream.ConsumerConfig{Durable: cname}); err == nil {
							t.Errorf("the %s's identity created consumer %s on %s", name, cname, stream)
						}
					})
				}
				refused.Go(func() {
					if _, err := c.js.OrderedConsumer(ctxT(t, 500*time.Millisecond), stream, jetstream.OrderedConsumerConfig{}); err == nil {
						t.Errorf("the %s's identity created an ordered consumer on %s", name, stream)
					}
				})
				for _, subj := range []string{"$JS.API.DIRECT.GET." + stream, "$JS.API.STREAM.MSG.GET." + stream} {
					refused.Go(func() {
						if msg, err := c.nc.Request(subj, []byte(`{"seq":1}`), 500*time.Millisecond); err == nil {
							t.Errorf("the %s's identity read %s through %s: %.80q", name, stream, subj, msg.Data)
						}
					})
				}
			}
		}
		// The rollout log's readers other than the collector read it by
		// direct get, never by a consumer.
		for name, c := range map[string]*conn{"gateway": gw, "analyzer": an} {
			refused.Go(func() {
				if _, err := c.js.OrderedConsumer(ctxT(t, 500*time.Millisecond), events.StreamRollout, jetstream.OrderedConsumerConfig{}); err == nil {
					t.Errorf("the %s's identity created a consumer on %s", name, events.StreamRollout)
				}
			})
		}
		refused.Wait()
	})

	t.Run("a malformed rollout message freezes nothing", func(t *testing.T) {
		for name, c := range map[string]*conn{"gateway": gw, "analyzer": an} {
			before := fold(t, gw, dep)
			ack, err := c.js.Publish(ctxT(t, time.Second), events.RolloutSubject(dep), []byte(`{"x":1}`))
			if err != nil {
				t.Fatalf("the %s's identity stores a message on a rollout subject: %v", name, err)
			}
			after := fold(t, gw, dep)
			want := before
			want.Revision, want.Note = ack.Sequence, after.Note
			if after != want || after.Note == "" {
				t.Errorf("after {\"x\":1} from the %s every gateway serves %+v; want %+v with a note", name, after, want)
			}
			// The operator's change (through the gateway) and the
			// analyzer's rollback are both accepted afterwards.
			for _, w := range []struct {
				who string
				c   *conn
				ev  *events.RolloutChanged
			}{
				{"operator", gw, rollout(dep, 0, events.StatusRolledBack, events.ActorAdmin)},
				{"analyzer", an, rollout(dep, 0, events.StatusRolledBack, events.ActorAnalyzer)},
			} {
				cur := fold(t, gw, dep)
				w.ev.Revision = cur.Revision
				seq, _, err := events.Publish(ctxT(t, time.Second), w.c.js, w.who+"/test", w.ev, time.Now(), jetstream.WithExpectLastSequencePerSubject(cur.Revision))
				if err != nil {
					t.Errorf("the %s's change after a malformed message from the %s: %v", w.who, name, err)
					continue
				}
				if st := fold(t, gw, dep); st.Revision != seq || st.Note != "" || st.Status != events.StatusRolledBack {
					t.Errorf("after the %s's change: %+v", w.who, st)
				}
			}
		}
	})

	t.Run("an identity without the permission cannot change a rollout", func(t *testing.T) {
		before := fold(t, gw, dep)
		info, _ := gw.js.Stream(ctxT(t, time.Second), events.StreamRollout)
		msgs := info.CachedInfo().State.Msgs
		// The collector's identity publishes a rollout event: JetStream
		// acknowledges nothing, and the server reports a violation.
		if err := publish(t, col, rollout(dep, 100, events.StatusActive, events.ActorAdmin), "collector/test"); err == nil {
			t.Fatal("the collector's identity stored a rollout event")
		}
		// Core NATS too (a raw PUB, as in the issue).
		_ = col.nc.Publish(events.RolloutSubject(dep), []byte(`{"percentage":100}`))
		_ = col.nc.Flush()
		time.Sleep(200 * time.Millisecond)
		if v := col.violations(); len(v) == 0 {
			t.Error("the server reported no permission violation to the collector")
		}
		after := fold(t, gw, dep)
		info, _ = gw.js.Stream(ctxT(t, time.Second), events.StreamRollout)
		if after != before || info.CachedInfo().State.Msgs != msgs {
			t.Errorf("rollout state changed from %+v to %+v (%d → %d events)", before, after, msgs, info.CachedInfo().State.Msgs)
		}
		if after.Status != events.StatusRolledBack {
			t.Errorf("every gateway serves %+v; want the analyzer's rollback to stand", after)
		}
	})

	t.Run("no service identity may purge, delete or update a stream", func(t *testing.T) {
		for name, c := range map[string]*conn{"gateway": gw, "analyzer": an, "collector": col} {
			s, err := c.js.Stream(ctxT(t, 2*time.Second), events.StreamRollout)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			before := s.CachedInfo().State.Msgs
			cfg := s.CachedInfo().Config
			cfg.MaxMsgsPerSubject = 1
			// Every attempt at once: a refused request waits out its timeout.
			var refused sync.WaitGroup
			for what, attempt := range map[string]func() error{
				"purged GRAYGATE_ROLLOUT":  func() error { return s.Purge(ctxT(t, time.Second)) },
				"deleted a rollout event":  func() error { return s.DeleteMsg(ctxT(t, time.Second), s.CachedInfo().State.LastSeq) },
				"deleted GRAYGATE_ROLLOUT": func() error { return c.js.DeleteStream(ctxT(t, time.Second), events.StreamRollout) },
				"updated GRAYGATE_ROLLOUT": func() error { _, err := c.js.UpdateStream(ctxT(t, time.Second), cfg); return err },
			} {
				refused.Go(func() {
					if attempt() == nil {
						t.Errorf("%s %s", name, what)
					}
				})
			}
			refused.Wait()
			info, err := gw.js.Stream(ctxT(t, 2*time.Second), events.StreamRollout)
			if err != nil || info.CachedInfo().State.Msgs != before || info.CachedInfo().Config.MaxMsgsPerSubject != events.RolloutPerSubject {
				t.Errorf("after %s's attempts GRAYGATE_ROLLOUT is %+v", name, info.CachedInfo())
			}
		}
	})
}

// TestAllowListsAreTheImports: each identity's publish allow list is
// exactly what its account leads into GRAYGATE (its service imports, by
// their local names), the subjects its account maps onto them, and what
// it exports itself; it subscribes to its own inbox and what its account
// imports as streams. So nothing reaches a stream through a reply subject
// that the identity could not publish (SPEC §11 rev. 4), and the allow
// lists say no more than the imports.
// accountInternal are the core subjects published and subscribed within
// one account only, by account.
var accountInternal = map[string][]string{"GATEWAY": {"graygate.balance.>"}}

func TestAllowListsAreTheImports(t *testing.T) {
	for _, v := range []string{"NATS_GATEWAY_PASSWORD", "NATS_ANALYZER_PASSWORD", "NATS_COLLECTOR_PASSWORD"} {
		t.Setenv(v, "sx")
	}
	top, err := conf.ParseFile("accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	accounts := mapAt(top, "accounts")
	if _, ok := accounts["GRAYGATE"]; !ok || len(asList(mapAt(accounts, "GRAYGATE")["users"])) != 0 {
		t.Error("account GRAYGATE, where the streams live, is missing or has users")
	}
	for name, a := range accounts {
		am, _ := a.(map[string]any)
		users := asList(am["users"])
		if name == "GRAYGATE" {
			continue
		}
		if len(users) != 1 {
			t.Errorf("account %s has %d users; want one identity per service account", name, len(users))
			continue
		}
		wantPub, wantSub := map[string]bool{}, map[string]bool{}
		for _, imp := range asList(am["imports"]) {
			m, _ := imp.(map[string]any)
			local := ""
			if to, ok := m["to"]; ok {
				local = fmt.Sprint(to)
			}
			if svc := mapAt(m, "service"); svc != nil {
				if local == "" {
					local = fmt.Sprint(svc["subject"])
				}
				wantPub[local] = true
			}
			if st := mapAt(m, "stream"); st != nil {
				if local == "" {
					local = fmt.Sprint(st["subject"])
				}
				wantSub[local] = true
			}
		}
		for from := range mapAt(am, "mappings") {
			wantPub[from] = true
		}
		for _, exp := range asList(am["exports"]) {
			if s, ok := exp.(map[string]any)["stream"]; ok {
				wantPub[fmt.Sprint(s)] = true
			}
		}
		u, _ := users[0].(map[string]any)
		user := fmt.Sprint(u["user"])
		wantSub["_INBOX_"+user+".>"] = true
		// Core subjects an account's identities share among
		// themselves, never across accounts: the gateways' prefix
		// index (prefix.share, SPEC §6.7 rev. 4).
		for _, s := range accountInternal[name] {
			wantPub[s], wantSub[s] = true, true
		}
		for kind, want := range map[string]map[string]bool{"publish": wantPub, "subscribe": wantSub} {
			got := map[string]bool{}
			for _, s := range asStrings(mapAt(u, "permissions", kind)["allow"]) {
				got[s] = true
			}
			for s := range got {
				if !want[s] {
					t.Errorf("%s may %s %s, which its account %s does not import, map or export", user, kind, s, name)
				}
			}
			for s := range want {
				if !got[s] {
					t.Errorf("%s may not %s %s, which its account %s imports, maps or exports", user, kind, s, name)
				}
			}
		}
	}
}
