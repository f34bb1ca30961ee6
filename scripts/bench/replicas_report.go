package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ReplicaResults is what --replicas measured, in SPEC §12's shape
// exactly; a figure that could not be read is null.
type ReplicaResults struct {
	Trace         string                  `json:"trace"`
	Replicas      int                     `json:"replicas"`
	Speed         float64                 `json:"speed"`
	DurationS     float64                 `json:"duration_s"`
	BoundHitRatio float64                 `json:"bound_hit_ratio"`
	Policies      map[string]PolicyResult `json:"policies"`
}

// PolicyResult is one policy's run on fresh replicas.
type PolicyResult struct {
	Requests int       `json:"requests"`
	Errors   int       `json:"errors"`
	TTFTMs   TTFTStats `json:"ttft_ms"`
	// CacheHitRatio is the replicas' prefix-cache hits ÷ queries, in
	// tokens, summed over the replicas.
	CacheHitRatio *float64 `json:"cache_hit_ratio"`
	// MaxOverMeanRequests is the busiest replica's requests ÷ the mean.
	MaxOverMeanRequests *float64 `json:"max_over_mean_requests"`
	// DecisionNsPerRequest is the gateways' balancing decision time per
	// decision; null when they do not report it.
	DecisionNsPerRequest *float64 `json:"decision_ns_per_request"`
	// GatewayCPUUsPerRequest is the gateways' utime+stime over the replay
	// ÷ the requests sent.
	GatewayCPUUsPerRequest *float64 `json:"gateway_cpu_us_per_request"`
}

// TTFTStats are the TTFTs of the requests that succeeded, in ms; null
// when none did.
type TTFTStats struct {
	Mean *float64 `json:"mean"`
	P50  *float64 `json:"p50"`
	P90  *float64 `json:"p90"`
	P99  *float64 `json:"p99"`
}

// replicaRun is what the report says beside the JSON: the run's settings
// and the notes of each policy.
type replicaRun struct {
	ReplicaResults
	order          []string // the policies in --policies order
	gateways       int
	share          bool
	kvCacheTokens  int64
	unboundedRatio float64
	promptTokens   int64
	distinctBlocks int
	notes          map[string][]string // per policy: where a figure came from, or why it is null
	firstErrors    map[string]map[string]int
}

// percentile is the nearest-rank percentile of sorted xs: the smallest
// value with at least q of them at or below it (q in (0, 1]).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// ttftStats summarizes TTFTs.
func ttftStats(ttfts []time.Duration) TTFTStats {
	if len(ttfts) == 0 {
		return TTFTStats{}
	}
	ms := make([]float64, len(ttfts))
	var sum float64
	for i, d := range ttfts {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	slices.Sort(ms)
	return TTFTStats{Mean: ptr(sum / float64(len(ms))), P50: ptr(percentile(ms, 0.5)), P90: ptr(percentile(ms, 0.9)), P99: ptr(percentile(ms, 0.99))}
}

// maxOverMean is the largest of counts ÷ their mean; nil without any.
func maxOverMean(counts []float64) *float64 {
	var sum, top float64
	for _, c := range counts {
		sum += c
		top = max(top, c)
	}
	if len(counts) == 0 || sum <= 0 {
		return nil
	}
	return ptr(top / (sum / float64(len(counts))))
}

// writeReplicaJSON writes the results in SPEC §12's shape.
func writeReplicaJSON(w io.Writer, r ReplicaResults) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// replicaCheck is one SPEC §12 target: PASS, MISS or n/a.
type replicaCheck struct {
	status, text string
}

// replicaChecks are SPEC §12 rev. 4's targets for one run: prefix hits
// ≥ 80 % of the bound; prefix mean and p90 TTFT ≤ 0.5× round_robin's;
// zero errors in every policy; busiest replica ≤ 1.5× the mean in every
// policy; least_loaded p99 TTFT ≤ 0.8× round_robin's.
func replicaChecks(r ReplicaResults, order []string) []replicaCheck {
	var out []replicaCheck
	add := func(ok *bool, text string, args ...any) {
		c := replicaCheck{status: "n/a", text: fmt.Sprintf(text, args...)}
		if ok != nil {
			c.status = map[bool]string{true: "PASS", false: "MISS"}[*ok]
		}
		out = append(out, c)
	}
	pr, hasPrefix := r.Policies[policyPrefix]
	rr, hasRR := r.Policies[policyRoundRobin]
	ll, hasLL := r.Policies[policyLeastLoaded]

	if hasPrefix && pr.CacheHitRatio != nil {
		add(ref(*pr.CacheHitRatio >= 0.8*r.BoundHitRatio), "prefix cache hits %.3f ≥ 80 %% of bound_hit_ratio %.3f (%.3f): %.0f %% of the bound",
			*pr.CacheHitRatio, r.BoundHitRatio, 0.8*r.BoundHitRatio, 100**pr.CacheHitRatio/r.BoundHitRatio)
	} else {
		add(nil, "prefix cache hits ≥ 80 %% of bound_hit_ratio %.3f (no prefix hit ratio)", r.BoundHitRatio)
	}
	ratio := func(name string, a, b *float64, limit float64, what string) {
		if a == nil || b == nil || *b <= 0 {
			add(nil, "%s ≤ %.1f× round_robin's (not measured)", what, limit)
			return
		}
		add(ref(*a <= limit**b), "%s %.0f ms ≤ %.1f× round_robin's %.0f ms: %.2f×", what, *a, limit, *b, *a / *b)
	}
	if hasPrefix && hasRR {
		ratio(policyPrefix, pr.TTFTMs.Mean, rr.TTFTMs.Mean, 0.5, "prefix mean TTFT")
		ratio(policyPrefix, pr.TTFTMs.P90, rr.TTFTMs.P90, 0.5, "prefix p90 TTFT")
	} else {
		add(nil, "prefix mean and p90 TTFT ≤ 0.5× round_robin's (needs both policies)")
	}
	if hasLL && hasRR {
		ratio(policyLeastLoaded, ll.TTFTMs.P99, rr.TTFTMs.P99, 0.8, "least_loaded p99 TTFT")
	} else {
		add(nil, "least_loaded p99 TTFT ≤ 0.8× round_robin's (needs both policies)")
	}
	for _, name := range order {
		p := r.Policies[name]
		add(ref(p.Errors == 0), "%s: zero errors (%d of %d requests)", name, p.Errors, p.Requests)
	}
	for _, name := range order {
		p := r.Policies[name]
		if p.MaxOverMeanRequests == nil {
			add(nil, "%s: busiest replica ≤ 1.5× the mean of requests (not measured)", name)
			continue
		}
		add(ref(*p.MaxOverMeanRequests <= 1.5), "%s: busiest replica %.2f× the mean of requests ≤ 1.5×", name, *p.MaxOverMeanRequests)
	}
	return out
}

// reportReplicas prints the run's table and its checks.
func reportReplicas(w io.Writer, run replicaRun) {
	r := run.ReplicaResults
	share := ""
	if run.gateways > 1 || run.share {
		share = fmt.Sprintf(", prefix.share %v", run.share)
	}
	fmt.Fprintf(w, "\nReplica balancing on a trace (SPEC §12 rev. 4)\n\n")
	fmt.Fprintf(w, "trace %s: %d requests replayed (%.0f s at %g×), %d prompt tokens, %d distinct blocks\n",
		r.Trace, requestsOf(r), r.DurationS, r.Speed, run.promptTokens, run.distinctBlocks)
	fmt.Fprintf(w, "%d engine replicas of %d KV-cache tokens, %d gateway(s)%s\n", r.Replicas, run.kvCacheTokens, run.gateways, share)
	fmt.Fprintf(w, "bound_hit_ratio %.3f (one LRU cache of %d tokens; unbounded %.3f)\n\n", r.BoundHitRatio, int64(r.Replicas)*run.kvCacheTokens, run.unboundedRatio)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\trequests\terrors\tTTFT mean ms\tp50\tp90\tp99\tcache hits\tof bound\tbusiest/mean\tdecision ns\tgateway CPU µs/req\t")
	for _, name := range run.order {
		p := r.Policies[name]
		ofBound := "-"
		if p.CacheHitRatio != nil && r.BoundHitRatio > 0 {
			ofBound = fmt.Sprintf("%.0f %%", 100**p.CacheHitRatio/r.BoundHitRatio)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, p.Requests, p.Errors,
			fmtNum(p.TTFTMs.Mean, 0), fmtNum(p.TTFTMs.P50, 0), fmtNum(p.TTFTMs.P90, 0), fmtNum(p.TTFTMs.P99, 0),
			fmtNum(p.CacheHitRatio, 3), ofBound, fmtNum(p.MaxOverMeanRequests, 2), fmtNum(p.DecisionNsPerRequest, 0), fmtNum(p.GatewayCPUUsPerRequest, 1))
	}
	tw.Flush()
	for _, name := range run.order {
		for _, n := range run.notes[name] {
			fmt.Fprintf(w, "  %s: %s\n", name, n)
		}
		for kind, n := range run.firstErrors[name] {
			fmt.Fprintf(w, "  %s: %d × %s\n", name, n, kind)
		}
	}
	fmt.Fprintf(w, "\nSPEC §12 targets (one run)\n\n")
	for _, c := range replicaChecks(r, run.order) {
		fmt.Fprintf(w, "%-4s %s\n", c.status, c.text)
	}
}

// requestsOf is the number of requests each policy replayed (the same).
func requestsOf(r ReplicaResults) int {
	for _, p := range r.Policies {
		return p.Requests
	}
	return 0
}

func ref[T any](v T) *T { return &v }

func fmtNum(v *float64, prec int) string {
	if v == nil || math.IsNaN(*v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, *v)
}

// policyNames lists policies for a message.
func policyNames(ps []string) string { return strings.Join(ps, ",") }
