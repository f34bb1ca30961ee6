package pool_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/schemas/config"
)

// stateHint is the hint of a Responses API request naming id.
func stateHint(id string) *pool.Hint {
	return &pool.Hint{Tokens: 100, PreviousResponseID: []byte(id)}
}

func TestResponseFollowsItsReplica(t *testing.T) {
	for _, policy := range []string{config.BalanceRoundRobin, config.BalanceLeastLoaded, config.BalancePrefix} {
		t.Run(policy, func(t *testing.T) {
			set := metrics.NewSet()
			p := newPool(t, upstreamOf(policy, fakeURLs(4)...), set)
			m := p.Members()
			for i, r := range m {
				p.LearnResponse(fmt.Sprintf("resp_%d", i), r)
			}
			// Load on the holder does not move a request off its state.
			decoding(m[2], 50)
			for range 50 {
				for i, want := range m {
					if r := send(p, stateHint(fmt.Sprintf("resp_%d", i))); r != want {
						t.Fatalf("resp_%d went to %s, want %s", i, r.Name, want.Name)
					}
				}
			}
			if got := grep(scrape(set), `result="prefix_hit"`); !strings.HasSuffix(got, " 200\n") {
				t.Fatalf("prefix hits: %q, want 200", got)
			}
		})
	}
}

func TestUnknownResponseGoesLeastLoaded(t *testing.T) {
	// Round robin as the arm's policy: an unknown id still goes to the
	// lighter replica.
	set := metrics.NewSet()
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, fakeURLs(2)...), set)
	m := p.Members()
	decoding(m[0], 10)
	for range 20 {
		if r := p.Pick(stateHint("resp_unknown"), nil); r != m[1] {
			t.Fatalf("unknown id went to %s, want the lighter %s", r.Name, m[1].Name)
		}
	}
	if got := grep(scrape(set), `result="prefix_miss"`); !strings.HasSuffix(got, " 20\n") {
		t.Fatalf("prefix misses: %q, want 20", got)
	}
}

func TestResponsesOldestOut(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalanceRoundRobin, fakeURLs(2)...), nil)
	r := p.Members()[1]
	for i := range pool.MaxResponses + 1 {
		p.LearnResponse(fmt.Sprintf("resp_%d", i), r)
	}
	if p.KnowsResponse("resp_0") {
		t.Fatal("the oldest id is still known past MaxResponses")
	}
	for _, id := range []string{"resp_1", fmt.Sprintf("resp_%d", pool.MaxResponses)} {
		if !p.KnowsResponse(id) {
			t.Fatalf("%s forgotten", id)
		}
	}
	// Learning a known id again does not take a place.
	p.LearnResponse("resp_1", r)
	p.LearnResponse("resp_new", r)
	if p.KnowsResponse("resp_1") {
		t.Fatal("resp_1 outlived a newer id: a repeat took a place")
	}
	if !p.KnowsResponse("resp_2") {
		t.Fatal("resp_2 forgotten before its turn")
	}
}

func TestResponseHolderNotServing(t *testing.T) {
	p := newPool(t, upstreamOf(config.BalanceLeastLoaded, fakeURLs(4)...), nil)
	m := p.Members()
	p.LearnResponse("resp_ejected", m[0])
	p.LearnResponse("resp_draining", m[1])
	p.LearnResponse("resp_tried", m[2])
	eject(p, m[0])
	if err := p.SetMembers([]string{m[0].URL, m[2].URL, m[3].URL}); err != nil {
		t.Fatal(err)
	}
	decoding(m[1], 1) // m[1] drains with a request in flight: still a member
	if m[0].State() != pool.Ejected || m[1].State() != pool.Draining {
		t.Fatalf("states %s %s, want ejected, draining", m[0].State(), m[1].State())
	}
	for range 50 {
		if r := p.Pick(stateHint("resp_ejected"), nil); r == m[0] || r == nil {
			t.Fatalf("ejected holder chosen (%v)", r)
		}
		if r := p.Pick(stateHint("resp_draining"), nil); r == m[1] || r == nil {
			t.Fatalf("draining holder chosen (%v)", r)
		}
		if r := p.Pick(stateHint("resp_tried"), []*pool.Replica{m[2]}); r == m[2] || r == nil {
			t.Fatalf("tried holder chosen again (%v)", r)
		}
	}
	if r := p.Pick(stateHint("resp_tried"), nil); r != m[2] {
		t.Fatalf("holder %s not chosen first", m[2].Name)
	}
}

func TestSingleURLLearnsNothing(t *testing.T) {
	u := upstreamOf(config.BalanceRoundRobin)
	u.Endpoints, u.URL = nil, "http://127.0.0.1:20001"
	p := newPool(t, u, nil)
	r := p.Members()[0]
	p.LearnResponse("resp_1", r)
	if p.KnowsResponse("resp_1") {
		t.Fatal("a single url keeps response ids")
	}
	if got := p.Pick(stateHint("resp_1"), nil); got != r {
		t.Fatalf("picked %v", got)
	}
}

func TestResponsesShared(t *testing.T) {
	u := upstreamOf(config.BalancePrefix, fakeURLs(3)...)
	u.Prefix.Share = true
	a, b := newPool(t, u, nil), newPool(t, u, nil)
	ma := a.Members()
	a.LearnResponse("resp_a", ma[2])
	rs := a.ExportResponses()
	if len(rs) != 1 || rs[0].ID != "resp_a" || rs[0].Replica != ma[2].Name {
		t.Fatalf("exported %+v", rs)
	}
	if again := a.ExportResponses(); len(again) != 0 {
		t.Fatalf("exported twice: %+v", again)
	}
	msg, err := pool.EncodeShared(&pool.Shared{Gateway: "a", Arms: []pool.SharedArm{{Arm: "primary", Responses: rs}}})
	if err != nil || msg == nil {
		t.Fatalf("encode: %v (%d bytes)", err, len(msg))
	}
	got, err := pool.DecodeShared(msg)
	if err != nil {
		t.Fatal(err)
	}
	rs = append(got.Arms[0].Responses, pool.SharedResponse{ID: "resp_x", Replica: "10.9.9.9:80"})
	if n := b.MergeResponses(rs); n != 1 {
		t.Fatalf("merged %d, want 1 (an unknown replica is skipped)", n)
	}
	if r := b.Pick(stateHint("resp_a"), nil); r.Name != ma[2].Name {
		t.Fatalf("merged id went to %s, want %s", r.Name, ma[2].Name)
	}
	if rs := b.ExportResponses(); len(rs) != 0 {
		t.Fatalf("merged ids exported again: %+v", rs)
	}
	// Without share nothing travels.
	c := newPool(t, upstreamOf(config.BalancePrefix, fakeURLs(3)...), nil)
	c.LearnResponse("resp_c", c.Members()[0])
	if rs := c.ExportResponses(); rs != nil {
		t.Fatalf("exported without share: %+v", rs)
	}
}
