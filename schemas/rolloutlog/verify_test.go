package rolloutlog

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

func userKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// signed is the body of a rollout event appended after prev, and the
// headers that sign it with kp (none when kp is nil).
func signed(t *testing.T, kp nkeys.KeyPair, ev events.RolloutChanged, prev *uint64) ([]byte, nats.Header) {
	t.Helper()
	ev.PrevRevision = prev
	env, err := events.NewEnvelope(events.TypeRolloutChanged, "test", &ev, time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC), "")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(env)
	h := nats.Header{}
	if kp != nil {
		var err error
		if h, err = events.Sign(kp, body); err != nil {
			t.Fatal(err)
		}
	}
	if prev != nil { // as the server keeps it from the append
		h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(*prev, 10))
	}
	return body, h
}

// withAppendHeader is m with its append header set to v ("": removed), as
// a copy published again carries it.
func withAppendHeader(m msg, v string) msg {
	h := nats.Header{}
	for k, vs := range m.h {
		h[k] = vs
	}
	h.Del(jetstream.ExpectedLastSubjSeqHeader)
	if v != "" {
		h.Set(jetstream.ExpectedLastSubjSeqHeader, v)
	}
	return msg{m.body, h}
}

// withHeader returns m with header k added as v.
func withHeader(m msg, k, v string) msg {
	h := nats.Header{}
	for key, vs := range m.h {
		h[key] = append([]string(nil), vs...)
	}
	h.Add(k, v)
	return msg{m.body, h}
}

func u(v uint64) *uint64 { return &v }

// TestVerifierCheck: with signers, an event counts only when its
// signature verifies, its signer may author its actor, its deployment is
// its subject's and its prev_revision is the message before it; without
// signers, unsigned events count as in rev. 3.
func TestVerifierCheck(t *testing.T) {
	analyzer, analyzerPub := userKey(t)
	gateway, gatewayPub := userKey(t)
	v := Verifier{Signers: events.NewSigners([]string{analyzerPub}, []string{gatewayPub}, []string{gatewayPub})}
	rollback := events.RolloutChanged{Deployment: "d", Status: events.StatusRolledBack, Reason: "r", Actor: events.ActorAnalyzer}
	admin := events.RolloutChanged{Deployment: "d", Percentage: 5, Status: events.StatusActive, Reason: "r", Actor: events.ActorAdmin, Operator: "alice"}
	other := rollback
	other.Deployment = "e"

	good := pair(signed(t, analyzer, rollback, u(7)))
	otherBody, _ := signed(t, analyzer, admin, u(7))
	for _, tt := range []struct {
		name       string
		m          msg
		prev, seq  uint64
		reason     string
		noteHas    string
		unsignedOK bool // also valid without signers
	}{
		{"the analyzer's rollback", good, 7, 9, "", "", true},
		{"the gateway's admin change", pair(signed(t, gateway, admin, u(7))), 7, 9, "", "", true},
		{"first retained, prev unknown", good, PrevUnknown, 9, "", "", true},
		{"an analyzer event signed by a gateway", pair(signed(t, gateway, rollback, u(7))), 7, 9, ReasonSigner, "does not list", true},
		{"an admin event signed by the analyzer", pair(signed(t, analyzer, admin, u(7))), 7, 9, ReasonSigner, "actor admin", true},
		{"unsigned", pair(signed(t, nil, rollback, u(7))), 7, 9, ReasonSignature, "not signed", true},
		{"another body's signature", msg{otherBody, good.h}, 7, 9, ReasonSignature, "does not verify", true},
		{"a replay: prev is not the message before", good, 8, 9, ReasonReplay, "replayed", true},
		{"a replay as the first retained, after itself", good, PrevUnknown, 7, ReasonReplay, "replayed", true},
		// A copy published again after the messages before it were pushed
		// out: the reader cannot know what preceded it, but the copy lacks
		// the header the server checked at the append (it would refuse it).
		{"a copy as the first retained, without the append header", withAppendHeader(good, ""), PrevUnknown, 9, ReasonReplay, "not stored as its append asked", true},
		{"a copy whose append header is not its prev_revision", withAppendHeader(good, "8"), PrevUnknown, 9, ReasonReplay, "not stored as its append asked", true},
		{"signed without prev_revision", pair(signed(t, analyzer, rollback, nil)), 7, 9, ReasonReplay, "without prev_revision", true},
		// The server checks the expected sequence against the subject
		// this header names: a first event (prev_revision 0) published
		// again with it is stored whatever its own subject holds.
		{"a copy stored against another subject's sequence", withHeader(pair(signed(t, analyzer, rollback, u(0))), expectedLastSubjSeqSubjHeader, "graygate.rollout.none"),
			PrevUnknown, 9, ReasonReplay, "which no append sets", true},
		{"two append headers", withHeader(good, jetstream.ExpectedLastSubjSeqHeader, "7"), 7, 9, ReasonReplay, "which no append sets", true},
		{"another deployment's", pair(signed(t, analyzer, other, u(7))), 7, 9, ReasonDeployment, "deployment e", false},
		{"not an event", msg{[]byte(`{"x":1}`), good.h}, 7, 9, ReasonUndecodable, "not a valid rollout event", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := v.Check("d", tt.prev, tt.seq, tt.m.h, tt.m.body)
			if got.Reason != tt.reason || !strings.Contains(got.Note, tt.noteHas) || got.Valid() != (tt.reason == "") || (got.Valid() && got.Event == nil) {
				t.Errorf("Check = %+v; want reason %q, a note with %q", got, tt.reason, tt.noteHas)
			}
			if open := (Verifier{}).Check("d", tt.prev, tt.seq, tt.m.h, tt.m.body); open.Valid() != tt.unsignedOK {
				t.Errorf("without signers Check = %+v; want valid %v", open, tt.unsignedOK)
			}
		})
	}
}

// msg is a message body and its headers.
type msg struct {
	body []byte
	h    nats.Header
}

func pair(b []byte, h nats.Header) msg { return msg{b, h} }

// TestVerifierConcurrent: one Verifier serves concurrent readers (run
// under -race).
func TestVerifierConcurrent(t *testing.T) {
	analyzer, pub := userKey(t)
	v := Verifier{Signers: events.NewSigners([]string{pub}, nil, nil)}
	body, h := signed(t, analyzer, events.RolloutChanged{Deployment: "d", Status: events.StatusRolledBack, Reason: "r", Actor: events.ActorAnalyzer}, u(1))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if got := v.Check("d", 1, 2, h, body); !got.Valid() {
					t.Errorf("Check = %+v", got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// FuzzVerifierCheck: no message on a rollout subject — body, signature
// or signer header — makes the verifier panic or accept what it must not:
// a valid verdict always carries an event of the subject's deployment
// signed by a listed key.
func FuzzVerifierCheck(f *testing.F) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		f.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	v := Verifier{Signers: events.NewSigners([]string{pub}, []string{pub}, []string{pub})}
	prev := uint64(3)
	env, _ := events.NewEnvelope(events.TypeRolloutChanged, "fuzz", &events.RolloutChanged{Deployment: "d", Status: events.StatusRolledBack,
		Reason: "r", Actor: events.ActorAnalyzer, PrevRevision: &prev}, time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), "")
	body, _ := json.Marshal(env)
	h, _ := events.Sign(kp, body)
	f.Add(body, h.Get(events.HeaderSignature), h.Get(events.HeaderSigner), uint64(3))
	f.Add([]byte(`{}`), "", "", uint64(0))
	f.Add(body, "!!", "UNOTAKEY", uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, sig, signer string, prev uint64) {
		h := nats.Header{}
		h.Set(events.HeaderSignature, sig)
		h.Set(events.HeaderSigner, signer)
		got := v.Check("d", prev, 7, h, data)
		if got.Valid() && (got.Event == nil || got.Event.Deployment != "d" || got.Signer != pub) {
			t.Fatalf("accepted %+v", got)
		}
	})
}
