package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// echoServer answers every line with itself until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line through c and reports whether it came back.
func roundTrip(c net.Conn) bool {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "ping\n"
}

func TestRouteProxyIsolate(t *testing.T) {
	// Every connection of this test is dialed by this process: node 1.
	self := func(c net.Conn) int {
		pid, err := dialerOf(c.RemoteAddr(), c.LocalAddr(), []int{os.Getpid()})
		if err != nil {
			t.Errorf("dialerOf: %v", err)
		}
		if pid == os.Getpid() {
			return 1
		}
		return 0
	}
	target := echoServer(t)
	for _, tc := range []struct {
		name  string
		node  int // the node behind the proxy
		other int // isolating this node leaves node 1's connections alone
	}{
		{"proxy of another node", 2, 3},
		{"node 1's own proxy", 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newRouteProxy(tc.node, target, self)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			dial := func() net.Conn {
				c, err := net.Dial("tcp", p.Addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			c := dial()
			if !roundTrip(c) {
				t.Fatal("no echo through the proxy")
			}
			if got := p.Open()[1]; got != 1 {
				t.Errorf("Open()[1] = %d; want 1 (the connection, told apart as node 1's)", got)
			}
			p.Isolate(tc.other)
			if !roundTrip(c) {
				t.Errorf("Isolate(%d) cut a connection node 1 dialed to node %d", tc.other, tc.node)
			}
			p.Isolate(1)
			if roundTrip(c) {
				t.Error("Isolate(1) left node 1's connection open")
			}
			if roundTrip(dial()) {
				t.Error("a new connection from node 1 passed while it is isolated")
			}
			p.Heal()
			if !roundTrip(dial()) {
				t.Error("no echo after Heal")
			}
		})
	}
}

func TestProcAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:4222", "0100007F:107E"},
		{"10.1.2.3:80", "0302010A:0050"},
	} {
		if got, err := procAddr(tc.in); err != nil || got != tc.want {
			t.Errorf("procAddr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := procAddr("[::1]:80"); err == nil {
		t.Error("procAddr of an IPv6 address: no error")
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP graygate_analyzer_lease_held 1 while …
# TYPE graygate_analyzer_lease_held gauge
graygate_analyzer_lease_held 1
graygate_analyzer_lease_held_total 7
graygate_analyzer_lease_vacant_seconds{bucket="x"} 12.5
`
	m := parseMetrics(text, metricLeaseHeld, metricLeaseVacant, "graygate_absent")
	if m[metricLeaseHeld] != 1 || m[metricLeaseVacant] != 12.5 {
		t.Errorf("parseMetrics = %v; want held 1, vacant 12.5", m)
	}
	if _, ok := m["graygate_absent"]; ok {
		t.Error("a family without a sample is in the map")
	}
}

func TestMarkConflicts(t *testing.T) {
	ev := func(seq uint64, actor, holder string, rev uint64) rolloutEvent {
		e := rolloutEvent{Seq: seq, Actor: actor}
		if holder != "" {
			e.Lease = &leaseRef{Holder: holder, Revision: rev}
		}
		return e
	}
	for _, tc := range []struct {
		name string
		evs  []rolloutEvent
		want []uint64 // sequences flagged
	}{
		{"one holder renewing", []rolloutEvent{ev(1, "analyzer", "a", 3), ev(2, "analyzer", "a", 9)}, nil},
		{"a clean takeover", []rolloutEvent{ev(1, "analyzer", "a", 3), ev(4, "analyzer", "b", 12), ev(6, "analyzer", "b", 15)}, nil},
		{"the old holder acts after the takeover", []rolloutEvent{ev(1, "analyzer", "a", 3), ev(2, "analyzer", "b", 12), ev(3, "analyzer", "a", 9)}, []uint64{3}},
		{"two holders on one revision", []rolloutEvent{ev(1, "analyzer", "a", 5), ev(2, "analyzer", "b", 5)}, []uint64{2}},
		{"operators and leaseless events are not judged", []rolloutEvent{ev(1, "admin", "", 0), ev(2, "analyzer", "", 0), ev(3, "analyzer", "a", 2)}, nil},
		{"out of stream order in the input", []rolloutEvent{ev(3, "analyzer", "a", 9), ev(1, "analyzer", "a", 3), ev(2, "analyzer", "b", 12)}, []uint64{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			markConflicts(tc.evs)
			var got []uint64
			for _, e := range tc.evs {
				if e.Conflict != "" {
					got = append(got, e.Seq)
				}
			}
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Errorf("flagged %v; want %v", got, tc.want)
			}
		})
	}
}

func TestTable(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	phases := []phase{
		{Name: "a", Start: at(0), Inject: at(3), Break: at(7), Heal: at(23), End: at(40)},
		{Name: "b", Start: at(40), Inject: at(43), Break: at(47), Heal: at(63), End: at(80)},
	}
	reqs := []request{
		{id: "drill-1", phase: 0, status: 200, arm: "primary", answered: at(1)},
		{id: "drill-2", phase: 0, status: 200, arm: "fallback", answered: at(8.5)}, // the first failed gray
		{id: "drill-3", phase: 0, status: 200, arm: "fallback", answered: at(9)},
		{id: "drill-4", phase: 0, status: 0, err: "connection reset"}, // no answer: not counted as sent
		{id: "drill-5", phase: 1, status: 200, arm: "primary", answered: at(41)},
		{id: "drill-6", phase: 1, status: 502, arm: "primary", answered: at(42), err: "status 502"},
		{id: "drill-7", phase: 1, status: 400, violation: true, answered: at(44)},
	}
	rows := map[string]int{"drill-1": 1, "drill-2": 2, "drill-3": 1, "drill-5": 1, "drill-7": 1} // drill-6 lost, drill-2 twice
	sample := func(s float64, held ...int) leaseSample {
		return leaseSample{at: at(s), held: held, vacantMetric: -1}
	}
	var samples []leaseSample
	for s := 0.0; s < 80; s += 0.5 {
		switch {
		case s >= 10 && s < 35: // phase a: 25 s without a holder, never reported
			samples = append(samples, sample(s, heldNo, heldUnknown))
		case s >= 50 && s < 52: // phase b: both said held for 2 s
			samples = append(samples, sample(s, heldYes, heldYes))
		default:
			samples = append(samples, sample(s, heldYes, heldNo))
		}
	}
	between := func(from, to time.Time) []leaseSample {
		var out []leaseSample
		for _, s := range samples {
			if !s.at.Before(from) && s.at.Before(to) {
				out = append(out, s)
			}
		}
		return out
	}
	rollouts := []rolloutEvent{
		{Seq: 2, Stored: at(12), Deployment: deployment, Actor: "analyzer", Status: string(events.StatusRolledBack)},
		{Seq: 3, Stored: at(41), Deployment: deployment, Actor: "admin", Status: string(events.StatusActive), Percentage: 20},
		{Seq: 4, Stored: at(50), Deployment: deployment, Actor: "analyzer", Status: string(events.StatusRolledBack),
			Lease: &leaseRef{Holder: "a", Revision: 7}},
		{Seq: 5, Stored: at(51), Deployment: deployment, Actor: "analyzer", Status: string(events.StatusRolledBack),
			Lease: &leaseRef{Holder: "b", Revision: 7}},
	}
	entry := func(rev uint64, pct float64) events.RolloutEntry {
		return events.RolloutEntry{Deployment: deployment, Revision: rev, Percentage: pct}
	}
	views := []gatewayView{
		{at: at(12.03), gw: 0, entry: entry(2, 0)},
		{at: at(12.09), gw: 1, entry: entry(2, 0)},
		{at: at(41.1), gw: 0, entry: entry(3, 20)},
		{at: at(41.1), gw: 1, entry: entry(3, 20)},
		{at: at(50.02), gw: 0, entry: entry(4, 0)}, // gateway 2 never shows seq 4
	}
	got := table(inputs{phases: phases, reqs: reqs, rows: rows, samples: between, rollouts: rollouts, views: views, gateways: 2})
	if len(got) != 2 {
		t.Fatalf("%d rows; want 2", len(got))
	}
	a, b := got[0], got[1]
	if want := (eventCounts{Sent: 3, Stored: 3, Lost: 0, Duplicated: 1}); a.Events != want {
		t.Errorf("a: events %+v; want %+v", a.Events, want)
	}
	if want := (eventCounts{Sent: 3, Stored: 2, Lost: 1, Duplicated: 0}); b.Events != want {
		t.Errorf("b: events %+v; want %+v", b.Events, want)
	}
	if a.ClientErrors != 1 || b.ClientErrors != 1 {
		t.Errorf("client errors %d, %d; want 1, 1", a.ClientErrors, b.ClientErrors)
	}
	if a.LongestVacancyS != 25 || !strings.HasPrefix(a.VacancyReported, "no") {
		t.Errorf("a: vacancy %.1f s reported %q; want 25.0 s, no", a.LongestVacancyS, a.VacancyReported)
	}
	if a.TwoActing != "n/a: no `lease` on events" {
		t.Errorf("a: two acting %q; want n/a", a.TwoActing)
	}
	if a.RollbackAppliedMs == nil || *a.RollbackAppliedMs != 90 {
		t.Errorf("a: rollback applied %v ms; want 90", a.RollbackAppliedMs)
	}
	if a.FailureToRollbackMs == nil || *a.FailureToRollbackMs != 3500 {
		t.Errorf("a: first failure to rollback %v ms; want 3500", a.FailureToRollbackMs)
	}
	if b.BothHeldS != 2 {
		t.Errorf("b: both held %.1f s; want 2", b.BothHeldS)
	}
	if !strings.HasPrefix(b.TwoActing, "yes") {
		t.Errorf("b: two acting %q; want yes (a and b on revision 7)", b.TwoActing)
	}
	if b.RollbackAppliedMs != nil {
		t.Errorf("b: rollback applied %v ms; want none (gateway 2 never showed it)", *b.RollbackAppliedMs)
	}
	if b.FailureToRollbackMs != nil {
		t.Errorf("b: first failure to rollback %v; want none (no failed gray answer)", *b.FailureToRollbackMs)
	}
	if md := markdown(got); strings.Count(md, "\n") != 4 {
		t.Errorf("markdown has %d lines; want header, rule and 2 rows:\n%s", strings.Count(md, "\n"), md)
	}
}

func TestVacancyReported(t *testing.T) {
	t0 := time.Now()
	var samples []leaseSample
	for i := range 100 { // 0.5 s apart: 50 s, vacant from 5 s to 40 s
		s := leaseSample{at: t0.Add(time.Duration(i) * 500 * time.Millisecond), held: []int{heldYes, heldNo}, vacantMetric: 0}
		if i >= 10 && i < 80 {
			s.held[0] = heldNo
			s.vacantMetric = float64(i-10) / 2
			s.readyzNoLease = i >= 50
		}
		samples = append(samples, s)
	}
	v := longestVacancy(samples)
	if v.Longest != 35*time.Second {
		t.Errorf("longest %s; want 35s", v.Longest)
	}
	if got := v.reported(10 * time.Second); got != "yes: metric after 0.5 s, readyz after 20.0 s" {
		t.Errorf("reported %q; want the metric after 0.5 s, readyz after 20.0 s", got)
	}
	short := longestVacancy(samples[:14]) // 2 s vacant, still open at the end
	if got := short.reported(10 * time.Second); got != "yes: metric after 0.5 s, readyz never" {
		t.Errorf("short vacancy reported %q; want the metric only", got)
	}
	late := append([]leaseSample(nil), samples[:30]...) // vacant 5–15 s, then held
	for i := 20; i < 30; i++ {
		late[i] = leaseSample{at: late[i].at, held: []int{heldYes, heldNo}, vacantMetric: 3, readyzNoLease: true}
	}
	for i := 10; i < 20; i++ {
		late[i].vacantMetric, late[i].readyzNoLease = 0, false
	}
	if got := longestVacancy(late).reported(2 * time.Second); got != "no" {
		t.Errorf("a vacancy said only after it ended: reported %q; want no", got)
	}
	if got := (vacancy{Longest: 15 * time.Second, MetricAfter: -1, ReadyzAfter: -1, Exported: true}).reported(10 * time.Second); got != "not required (≤ 2 × lease_ttl)" {
		t.Errorf("15 s unreported at a 10 s TTL: %q", got)
	}
}

func TestDecodeRollout(t *testing.T) {
	// An analyzer rollback as SPEC §11 rev. 4 writes it (lease on every
	// analyzer event), one without a lease, and a message that is no event.
	withLease := `{"specversion":"1.0","id":"0190","source":"analyzer/x","type":"graygate.rollout.changed","time":"2026-12-04T22:00:00Z",` +
		`"data":{"deployment":"qwen","percentage":0,"status":"rolled_back","reason":"gate","actor":"analyzer","revision":7,` +
		`"lease":{"holder":"analyzer/x/1","revision":42}}}`
	e, ok := decodeRollout([]byte(withLease))
	if !ok || e.Deployment != "qwen" || e.Actor != "analyzer" || e.Status != "rolled_back" || e.Lease == nil ||
		*e.Lease != (leaseRef{Holder: "analyzer/x/1", Revision: 42}) {
		t.Errorf("decodeRollout(with lease) = %+v, %v", e, ok)
	}
	e, ok = decodeRollout([]byte(`{"data":{"deployment":"qwen","percentage":20,"status":"active","actor":"admin"}}`))
	if !ok || e.Lease != nil || e.Percentage != 20 {
		t.Errorf("decodeRollout(without lease) = %+v, %v", e, ok)
	}
	if _, ok := decodeRollout([]byte("not json")); ok {
		t.Error("decodeRollout(not json) ok")
	}
}
