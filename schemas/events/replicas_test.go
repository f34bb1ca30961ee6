package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// pool returns n replicas named 10.0.<i/256>.<i%256>:8000.
func pool(n int) []events.ReplicaStatus {
	out := make([]events.ReplicaStatus, n)
	for i := range out {
		out[i] = events.ReplicaStatus{Replica: fmt.Sprintf("10.0.%d.%d:8000", i/256, i%256), State: events.ReplicaHealthy, Requests: int64(i)}
	}
	return out
}

func TestReplicasStatusSplit(t *testing.T) {
	tests := []struct {
		name      string
		arms      []events.ArmReplicas
		wantParts [][]int // per part, the replicas of each of its arms
	}{
		{"no arms", nil, [][]int{{}}},
		{"one small arm", []events.ArmReplicas{{Arm: events.ArmPrimary, Replicas: pool(3)}}, [][]int{{3}}},
		{"exactly 256 over two arms", []events.ArmReplicas{
			{Arm: events.ArmPrimary, Replicas: pool(200)}, {Arm: events.ArmGray, Replicas: pool(56)},
		}, [][]int{{200, 56}}},
		{"257 in one arm", []events.ArmReplicas{{Arm: events.ArmPrimary, Replicas: pool(257)}}, [][]int{{256}, {1}}},
		{"1024 primary and 300 gray", []events.ArmReplicas{
			{Arm: events.ArmPrimary, Replicas: pool(1024)}, {Arm: events.ArmGray, Replicas: pool(300)},
		}, [][]int{{256}, {256}, {256}, {256}, {256}, {44}}},
		{"an empty arm between", []events.ArmReplicas{
			{Arm: events.ArmPrimary, Replicas: pool(300)}, {Arm: events.ArmGray, Replicas: []events.ReplicaStatus{}},
		}, [][]int{{256}, {44, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &events.ReplicasStatus{Deployment: "qwen", Gateway: "gw/1", Time: exampleTime, Arms: tt.arms}
			for i := range s.Arms {
				s.Arms[i].Balance = events.BalanceLeastLoaded
			}
			before := fmt.Sprintf("%+v", *s)
			parts := s.Split()
			if got := fmt.Sprintf("%+v", *s); got != before {
				t.Errorf("Split changed its receiver")
			}
			if len(parts) != len(tt.wantParts) {
				t.Fatalf("Split() gave %d parts; want %d", len(parts), len(tt.wantParts))
			}
			// Every replica once, in order, over the parts.
			got := map[events.Arm][]events.ReplicaStatus{}
			for i, p := range parts {
				if p.Part != i+1 || p.Parts != len(parts) || p.Gateway != s.Gateway || p.Deployment != s.Deployment || !p.Time.Equal(s.Time) {
					t.Errorf("part %d: part %d/%d %s %s %v", i, p.Part, p.Parts, p.Gateway, p.Deployment, p.Time)
				}
				if err := p.Check(); err != nil {
					t.Errorf("part %d: Check: %v", i+1, err)
				}
				var sizes []int
				for _, a := range p.Arms {
					sizes = append(sizes, len(a.Replicas))
					got[a.Arm] = append(got[a.Arm], a.Replicas...)
				}
				if fmt.Sprint(sizes) != fmt.Sprint(tt.wantParts[i]) {
					t.Errorf("part %d holds arms of %v replicas; want %v", i+1, sizes, tt.wantParts[i])
				}
				b, err := json.Marshal(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := events.Validate(events.TypeReplicasStatus, b); err != nil {
					t.Errorf("part %d: Validate: %v", i+1, err)
				}
			}
			for _, a := range tt.arms {
				if !reflect.DeepEqual(got[a.Arm], a.Replicas) && len(a.Replicas) > 0 {
					t.Errorf("arm %s: the parts hold %d replicas; want its %d in order", a.Arm, len(got[a.Arm]), len(a.Replicas))
				}
			}
		})
	}
}

func TestReplicasStatusCheck(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(s *events.ReplicasStatus)
		want   string // in the error; "" means valid
		schema bool   // the schema refuses it too
	}{
		{"valid", func(*events.ReplicasStatus) {}, "", true},
		{"empty arms", func(s *events.ReplicasStatus) { s.Arms = []events.ArmReplicas{} }, "", true},
		{"null arms", func(s *events.ReplicasStatus) { s.Arms = nil }, "arms is null", true},
		{"dotted deployment", func(s *events.ReplicasStatus) { s.Deployment = "a.b" }, "deployment", true},
		{"no gateway", func(s *events.ReplicasStatus) { s.Gateway = "" }, "gateway is empty", true},
		{"no time", func(s *events.ReplicasStatus) { s.Time = time.Time{} }, "time is missing", false},
		{"part 0", func(s *events.ReplicasStatus) { s.Part = 0 }, "part 0", true},
		{"part past parts", func(s *events.ReplicasStatus) { s.Part, s.Parts = 3, 2 }, "part 3 of parts 2", false},
		{"shadow arm", func(s *events.ReplicasStatus) { s.Arms[1].Arm = events.ArmShadow }, "is not primary or gray", true},
		{"arm twice", func(s *events.ReplicasStatus) { s.Arms[1].Arm = events.ArmPrimary }, "listed twice", false},
		{"unknown balance", func(s *events.ReplicasStatus) { s.Arms[0].Balance = "random" }, "balance", true},
		{"null replicas", func(s *events.ReplicasStatus) { s.Arms[1].Replicas = nil }, "replicas is null", true},
		{"unknown state", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[0].State = "sleepy" }, "state", true},
		{"negative in flight", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[0].InFlight = -1 }, "in_flight is negative", true},
		{"negative failures", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[1].ConsecutiveFailures = -2 }, "consecutive_failures", true},
		{"replica twice", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[1].Replica = s.Arms[0].Replicas[0].Replica }, "listed twice", false},
		{"control in replica", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[0].Replica = "a\nb:1" }, "control character", true},
		{"long last error", func(s *events.ReplicasStatus) {
			s.Arms[0].Replicas[1].LastError = strings.Repeat("x", events.MaxLastErrorLen+1)
		}, "last_error", true},
		{"NaN gauge", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[0].Engine.KVCacheUsage = math.NaN() }, "kv_cache_usage", false},
		{"negative gauge", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[0].Engine.Waiting = -1 }, "engine.waiting", true},
		{"gauges without scrape time", func(s *events.ReplicasStatus) { s.Arms[0].Replicas[0].Engine.ScrapedAt = time.Time{} }, "scraped_at", false},
		{"257 replicas", func(s *events.ReplicasStatus) { s.Arms[1].Replicas = pool(255) }, "Split", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := exampleReplicas()
			tt.edit(s)
			err := s.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check() = %v; want nil", err)
			case tt.want != "" && (!errors.Is(err, events.ErrInvalidData) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Check() = %v; want ErrInvalidData naming %q", err, tt.want)
			}
			b, mErr := json.Marshal(s)
			if mErr != nil {
				return // NaN: json.Marshal refuses it as NewEnvelope does
			}
			if vErr := events.Validate(events.TypeReplicasStatus, b); (vErr != nil) != (tt.want != "" && tt.schema) {
				t.Errorf("Validate = %v; want an error %v", vErr, tt.want != "" && tt.schema)
			}
		})
	}
}

// A replicas status goes through NewEnvelope, the fast DecodeEvent and
// the slow Decode + DecodeData to the same value, on its own subject.
func TestReplicasStatusRoundTrip(t *testing.T) {
	s := exampleReplicas()
	if got, want := s.Subject(), "graygate.replicas.qwen-32k"; got != want {
		t.Errorf("Subject() = %q; want %q", got, want)
	}
	env, err := events.NewEnvelope(events.TypeReplicasStatus, "gateway/gw-7f9c", *s, exampleTime, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	_, fast, err := events.DecodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	slowEnv, err := events.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := events.DecodeData(slowEnv)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]events.Data{"DecodeEvent": fast, "DecodeData": slow} {
		got, ok := d.(*events.ReplicasStatus)
		if !ok {
			t.Fatalf("%s gave %T", name, d)
		}
		a, _ := json.Marshal(got)
		w, _ := json.Marshal(s)
		if string(a) != string(w) {
			t.Errorf("%s:\n%s\nwant\n%s", name, a, w)
		}
	}
}

// Events of gateways before rev. 4 — no replica, no cached_tokens, no
// gray replica — still decode, as "" and nil.
func TestEventsBeforeRev4Decode(t *testing.T) {
	for _, tt := range []struct {
		file   string
		drop   []string // from data
		inGray []string // from data.gray
	}{
		{"testdata/request.completed.fallback.event.json", []string{"replica", "cached_tokens"}, []string{"replica"}},
		{"testdata/request.completed.primary.event.json", []string{"replica", "cached_tokens"}, nil},
		{"testdata/sample.malformed.text.event.json", []string{"replica"}, nil},
	} {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			var ev map[string]any
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatal(err)
			}
			data := ev["data"].(map[string]any)
			for _, k := range tt.drop {
				delete(data, k)
			}
			for _, k := range tt.inGray {
				delete(data["gray"].(map[string]any), k)
			}
			old, _ := json.Marshal(ev)
			for name, decode := range map[string]func([]byte) (events.Data, error){
				"DecodeEvent": func(b []byte) (events.Data, error) { _, d, err := events.DecodeEvent(b); return d, err },
				"Decode+DecodeData": func(b []byte) (events.Data, error) {
					env, err := events.Decode(b)
					if err != nil {
						return nil, err
					}
					return events.DecodeData(env)
				},
			} {
				d, err := decode(old)
				if err != nil {
					t.Fatalf("%s of an event before rev. 4: %v", name, err)
				}
				switch v := d.(type) {
				case *events.RequestCompleted:
					if v.Replica != "" || v.CachedTokens != nil || v.Gray != nil && v.Gray.Replica != "" {
						t.Errorf("%s: replica %q, cached_tokens %v; want \"\" and nil", name, v.Replica, v.CachedTokens)
					}
				case *events.SampleMalformed:
					if v.Replica != "" {
						t.Errorf("%s: replica %q; want \"\"", name, v.Replica)
					}
				}
			}
		})
	}
}

// TestPublishReplicasStatus stores a split status in GRAYGATE_POOLS, one
// message per part on the deployment's subject.
func TestPublishReplicasStatus(t *testing.T) {
	js := startServer(t)
	ctx := context.Background()
	if err := events.EnsureStreams(ctx, js, 1, nil); err != nil {
		t.Fatal(err)
	}
	s := &events.ReplicasStatus{Deployment: "qwen", Gateway: "gw/1", Time: exampleTime, Arms: []events.ArmReplicas{
		{Arm: events.ArmPrimary, Balance: events.BalancePrefix, Replicas: pool(600)},
	}}
	parts := s.Split()
	for _, p := range parts {
		if _, _, err := events.Publish(ctx, js, "gateway/gw", p, time.Now()); err != nil {
			t.Fatalf("publish part %d: %v", p.Part, err)
		}
	}
	st, err := js.Stream(ctx, events.StreamPools)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.State.Msgs != uint64(len(parts)) || len(parts) != 3 {
		t.Errorf("GRAYGATE_POOLS holds %d messages; want the %d parts (3)", info.State.Msgs, len(parts))
	}
	raw, err := st.GetMsg(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	_, d, err := events.DecodeEvent(raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	if p := d.(*events.ReplicasStatus); raw.Subject != "graygate.replicas.qwen" || p.Part != 3 || len(p.Arms[0].Replicas) != 600-512 {
		t.Errorf("message 3 on %s is part %d with %d replicas; want part 3 of 88 on graygate.replicas.qwen", raw.Subject, p.Part, len(p.Arms[0].Replicas))
	}
}
