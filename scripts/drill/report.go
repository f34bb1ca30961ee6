package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// phase is one fault's time line.
type phase struct {
	Name   string    `json:"fault"`
	What   string    `json:"what"`
	Start  time.Time `json:"start"`
	Inject time.Time `json:"injected"`
	Break  time.Time `json:"gray_broken"`
	Heal   time.Time `json:"healed"`
	// Healthy: when every node's /healthz answered 200 again after the
	// heal (zero when it did not within 90 s).
	Healthy time.Time `json:"healthy"`
	End     time.Time `json:"end"`
}

// leaseRef is the `lease` of an analyzer's rollout event (SPEC §11 rev.
// 4): the holder and the revision of its last renewal.
type leaseRef struct {
	Holder   string `json:"holder"`
	Revision uint64 `json:"revision"`
}

// rolloutEvent is one message of the rollout stream as the drill reads it.
type rolloutEvent struct {
	Seq        uint64
	Stored     time.Time // the stream's timestamp
	Deployment string
	Actor      string
	Status     string
	Percentage float64
	Lease      *leaseRef
	// Conflict says why this event shows two analyzers acting at once
	// ("" when it does not); set by markConflicts.
	Conflict string
}

// markConflicts flags the analyzer events, in stream order, that were
// appended on a lease older than one another analyzer event already
// used, or on the same lease revision by another holder: either means two
// analyzers acted at once. Events without a lease are not judged.
func markConflicts(evs []rolloutEvent) {
	sort.Slice(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	var top *rolloutEvent
	for i := range evs {
		e := &evs[i]
		if e.Actor != string(events.ActorAnalyzer) || e.Lease == nil {
			continue
		}
		if top != nil {
			switch {
			case e.Lease.Revision < top.Lease.Revision:
				e.Conflict = fmt.Sprintf("seq %d by %s on lease revision %d, after seq %d by %s on revision %d",
					e.Seq, e.Lease.Holder, e.Lease.Revision, top.Seq, top.Lease.Holder, top.Lease.Revision)
			case e.Lease.Revision == top.Lease.Revision && e.Lease.Holder != top.Lease.Holder:
				e.Conflict = fmt.Sprintf("seq %d by %s and seq %d by %s on the same lease revision %d",
					top.Seq, top.Lease.Holder, e.Seq, e.Lease.Holder, e.Lease.Revision)
			}
		}
		if top == nil || e.Lease.Revision >= top.Lease.Revision {
			top = e
		}
	}
}

// twoActing judges the analyzer events stored in [from, to): "no", "yes:
// …", or "n/a: …" when none of them carries a lease.
func twoActing(evs []rolloutEvent, from, to time.Time) string {
	var n, withLease int
	var conflicts []string
	for _, e := range evs {
		if e.Actor != string(events.ActorAnalyzer) || e.Stored.Before(from) || !e.Stored.Before(to) {
			continue
		}
		n++
		if e.Lease != nil {
			withLease++
		}
		if e.Conflict != "" {
			conflicts = append(conflicts, e.Conflict)
		}
	}
	switch {
	case n == 0:
		return "n/a: no analyzer event"
	case withLease == 0:
		return "n/a: no `lease` on events"
	case len(conflicts) > 0:
		return "yes: " + strings.Join(conflicts, "; ")
	}
	return "no"
}

// eventCounts are one phase's requests against the rows stored for them.
type eventCounts struct {
	Sent       int `json:"sent"`       // answered by a gateway: each must be stored once
	Stored     int `json:"stored"`     // of those, stored at least once
	Lost       int `json:"lost"`       // answered, never stored
	Duplicated int `json:"duplicated"` // rows beyond the first for one request
}

// countEvents compares, per phase, the requests a gateway answered with
// the rows stored for them (rows: request id → rows in requests and
// rejections).
func countEvents(reqs []request, rows map[string]int, phases int) []eventCounts {
	out := make([]eventCounts, phases)
	for _, r := range reqs {
		if r.status == 0 || r.phase < 0 || r.phase >= phases {
			continue
		}
		c := &out[r.phase]
		c.Sent++
		switch n := rows[r.id]; {
		case n == 0:
			c.Lost++
		default:
			c.Stored++
			c.Duplicated += n - 1
		}
	}
	return out
}

// vacancy is the longest time in a phase's lease samples with no analyzer
// holding the lease, and how it was reported.
type vacancy struct {
	Longest    time.Duration
	Start, End time.Time
	// MetricAfter and ReadyzAfter: how long after the vacancy began an
	// analyzer first exported graygate_analyzer_lease_vacant_seconds above
	// 0, and first answered /readyz 503 naming the vacancy, while it
	// lasted and within a minute; negative when none did.
	MetricAfter, ReadyzAfter time.Duration
	// Exported: some analyzer exported graygate_analyzer_lease_vacant_seconds.
	Exported bool
}

// longestVacancy finds the longest run of samples in which no analyzer
// said it held the lease (a stopped or silent analyzer holds nothing it
// can act on), from its first such sample to the next with a holder, and
// the first samples while it lasted (within a minute of its start) in
// which an analyzer reported a vacancy, by metric and by /readyz; an
// analyzer that says so after another took the lease reports nothing.
func longestVacancy(samples []leaseSample) vacancy {
	v := vacancy{MetricAfter: -1, ReadyzAfter: -1}
	var start time.Time
	open := false
	closeRun := func(end time.Time) {
		if d := end.Sub(start); d > v.Longest {
			v.Longest, v.Start, v.End = d, start, end
		}
	}
	for _, s := range samples {
		if s.vacantMetric >= 0 {
			v.Exported = true
		}
		held := false
		for _, h := range s.held {
			held = held || h == heldYes
		}
		switch {
		case !held && !open:
			open, start = true, s.at
		case held && open:
			open = false
			closeRun(s.at)
		}
	}
	if open && len(samples) > 0 {
		closeRun(samples[len(samples)-1].at)
	}
	if v.Longest == 0 {
		return v
	}
	for _, s := range samples {
		if s.at.Before(v.Start) || !s.at.Before(v.End) || s.at.After(v.Start.Add(time.Minute)) {
			continue
		}
		if s.vacantMetric > 0 && v.MetricAfter < 0 {
			v.MetricAfter = s.at.Sub(v.Start)
		}
		if s.readyzNoLease && v.ReadyzAfter < 0 {
			v.ReadyzAfter = s.at.Sub(v.Start)
		}
	}
	return v
}

// reported says whether and how the vacancy was reported; SPEC §11 rev.
// 4 asks it of one longer than 2 × lease_ttl, within a minute.
func (v vacancy) reported(ttl time.Duration) string {
	after := func(d time.Duration) string {
		if d < 0 {
			return "never"
		}
		return fmt.Sprintf("after %.1f s", d.Seconds())
	}
	switch {
	case v.Longest == 0:
		return "—"
	case v.MetricAfter >= 0 || v.ReadyzAfter >= 0:
		return fmt.Sprintf("yes: metric %s, readyz %s", after(v.MetricAfter), after(v.ReadyzAfter))
	case v.Longest <= 2*ttl:
		return "not required (≤ 2 × lease_ttl)"
	case !v.Exported:
		return "no (readyz never named it; lease_vacant_seconds not exported)"
	}
	return "no"
}

// bothHeld is the time in which two or more analyzers said they held the
// lease, each sample standing for the time to the next.
func bothHeld(samples []leaseSample) time.Duration {
	var d time.Duration
	for i := 0; i+1 < len(samples); i++ {
		n := 0
		for _, h := range samples[i].held {
			if h == heldYes {
				n++
			}
		}
		if n >= 2 {
			d += samples[i+1].at.Sub(samples[i].at)
		}
	}
	return d
}

// rollbackIn returns the first analyzer rollback of the drill's
// deployment stored in [from, to).
func rollbackIn(evs []rolloutEvent, from, to time.Time) *rolloutEvent {
	for i := range evs {
		e := &evs[i]
		if e.Deployment == deployment && e.Actor == string(events.ActorAnalyzer) && e.Status == string(events.StatusRolledBack) &&
			!e.Stored.Before(from) && e.Stored.Before(to) {
			return e
		}
	}
	return nil
}

// appliedEverywhere returns when the last of n gateways first showed the
// rollback at seq (its revision or a later one, at 0 %), and false when
// one never did.
func appliedEverywhere(views []gatewayView, n int, seq uint64) (time.Time, bool) {
	first := make([]time.Time, n)
	for _, v := range views {
		if v.gw < n && first[v.gw].IsZero() && v.entry.Revision >= seq && v.entry.Percentage == 0 {
			first[v.gw] = v.at
		}
	}
	var last time.Time
	for _, t := range first {
		if t.IsZero() {
			return time.Time{}, false
		}
		if t.After(last) {
			last = t
		}
	}
	return last, true
}

// firstFailure returns when the first answer served by the fallback (the
// gray attempt failed) after the gray broke in phase i came back.
func firstFailure(reqs []request, i int, broke time.Time) (time.Time, bool) {
	var first time.Time
	for _, r := range reqs {
		if r.phase == i && r.arm == string(events.ArmFallback) && !r.answered.Before(broke) &&
			(first.IsZero() || r.answered.Before(first)) {
			first = r.answered
		}
	}
	return first, !first.IsZero()
}

// row is one fault's line of the table.
type row struct {
	Fault           string      `json:"fault"`
	What            string      `json:"what"`
	ClientErrors    int         `json:"client_errors"`
	Events          eventCounts `json:"events"`
	LongestVacancyS float64     `json:"longest_vacancy_s"`
	VacancyReported string      `json:"vacancy_reported"`
	TwoActing       string      `json:"two_analyzers_acting"`
	BothHeldS       float64     `json:"both_held_by_metrics_s"`
	// RollbackAppliedMs: the rollback's stream timestamp to the moment the
	// last gateway's admin API showed it; nil when there was none.
	RollbackAppliedMs *float64 `json:"rollback_stored_to_all_gateways_ms"`
	// FailureToRollbackMs: the first answer of a failed gray attempt to the
	// rollback's stream timestamp; nil when either is missing.
	FailureToRollbackMs *float64 `json:"first_gray_failure_to_rollback_stored_ms"`
	Notes               []string `json:"notes,omitempty"`
}

// inputs is everything the table is computed from.
type inputs struct {
	phases   []phase
	reqs     []request
	rows     map[string]int
	samples  func(from, to time.Time) []leaseSample
	rollouts []rolloutEvent
	views    []gatewayView
	gateways int
}

// table computes a row per phase.
func table(in inputs) []row {
	counts := countEvents(in.reqs, in.rows, len(in.phases))
	markConflicts(in.rollouts)
	var out []row
	for i, p := range in.phases {
		r := row{Fault: p.Name, What: p.What, Events: counts[i]}
		if !p.Inject.IsZero() {
			healthy := "not healthy within 90 s of the heal"
			if !p.Healthy.IsZero() {
				healthy = fmt.Sprintf("every node healthy %s after the heal", p.Healthy.Sub(p.Heal).Round(100*time.Millisecond))
			}
			r.What = fmt.Sprintf("%s (%s of outage; %s)", p.What, p.Heal.Sub(p.Inject).Round(100*time.Millisecond), healthy)
		}
		for _, q := range in.reqs {
			if q.phase == i && q.err != "" {
				r.ClientErrors++
			}
		}
		samples := in.samples(p.Start, p.End)
		v := longestVacancy(samples)
		r.LongestVacancyS = v.Longest.Seconds()
		r.VacancyReported = v.reported(leaseTTL)
		r.BothHeldS = bothHeld(samples).Seconds()
		r.TwoActing = twoActing(in.rollouts, p.Start, p.End)
		rb := rollbackIn(in.rollouts, p.Break, p.End)
		if rb == nil {
			r.Notes = append(r.Notes, "no analyzer rollback stored after the gray broke")
		} else {
			var views []gatewayView
			for _, v := range in.views {
				if v.at.Before(p.End) {
					views = append(views, v)
				}
			}
			if at, ok := appliedEverywhere(views, in.gateways, rb.Seq); ok {
				ms := float64(at.Sub(rb.Stored).Microseconds()) / 1000
				r.RollbackAppliedMs = &ms
			} else {
				r.Notes = append(r.Notes, fmt.Sprintf("rollback at seq %d not seen on every gateway before the phase ended", rb.Seq))
			}
			if at, ok := firstFailure(in.reqs, i, p.Break); ok {
				ms := float64(rb.Stored.Sub(at).Microseconds()) / 1000
				r.FailureToRollbackMs = &ms
			} else {
				r.Notes = append(r.Notes, "no failed gray answer seen by the client")
			}
		}
		out = append(out, r)
	}
	return out
}

// markdown renders the rows as a table.
func markdown(rows []row) string {
	var b strings.Builder
	b.WriteString("| fault | client errors | events sent / stored | lost | duplicated | longest with no lease holder | vacancy reported | two analyzers acting (events' `lease`) | two holders (metrics) | rollback stored → every gateway at 0 % | first failing gray answer → rollback stored |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |\n")
	ms := func(p *float64) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%.0f ms", *p)
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d / %d | %d | %d | %.1f s | %s | %s | %.1f s | %s | %s |\n",
			r.Fault, r.ClientErrors, r.Events.Sent, r.Events.Stored, r.Events.Lost, r.Events.Duplicated,
			r.LongestVacancyS, r.VacancyReported, r.TwoActing, r.BothHeldS, ms(r.RollbackAppliedMs), ms(r.FailureToRollbackMs))
	}
	return b.String()
}
