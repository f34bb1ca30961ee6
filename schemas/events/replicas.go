package events

import (
	"math"
	"slices"
	"strconv"
	"time"
)

// ReplicasStatus is the data of a graygate.replicas.status event (SPEC §6.7
// "What is seen", §7 rev. 4): one gateway's view of the replica pools of
// one deployment's arms, what GET /admin/upstreams lists for it, published
// every 10 s on ReplicasSubject(Deployment).
//
// One event holds at most MaxReplicasPerPart replicas; a larger view is
// published as Parts events that share Gateway, Deployment and Time, with
// Part 1, 2, … Parts (Split makes them). Readers keep the latest view per
// (Gateway, Deployment).
type ReplicasStatus struct {
	// Deployment whose pools these are.
	Deployment string `json:"deployment"`
	// Gateway is the publishing gateway, as in statistics: hostname "/"
	// a random id drawn at start.
	Gateway string `json:"gateway"`
	// Time is when the view was taken, UTC; every part of one view has it.
	Time time.Time `json:"time"`
	// Part is this event's number among the view's Parts, from 1.
	Part int `json:"part"`
	// Parts is how many events the view was split into (1 when it fits).
	Parts int `json:"parts"`
	// Arms holds, per arm (primary, gray) whose replicas are in this part,
	// its balancing policy and its replicas; an empty list, never null.
	Arms []ArmReplicas `json:"arms"`
}

// ArmReplicas is one arm's pool in a ReplicasStatus: the arm, its
// balancing policy, and (the part of) its replicas.
type ArmReplicas struct {
	// Arm is ArmPrimary or ArmGray (shadow copies go to gray's pool).
	Arm Arm `json:"arm"`
	// Balance is the arm's balancing policy.
	Balance Balance `json:"balance"`
	// Replicas are the entries of GET /admin/upstreams for the arm, at
	// most MaxReplicasPerPart in the whole event; an empty list, never
	// null.
	Replicas []ReplicaStatus `json:"replicas"`
}

// ReplicaStatus is one replica as GET /admin/upstreams lists it (SPEC §3
// rev. 4): the same JSON, so the gateway writes one value to both.
type ReplicaStatus struct {
	// Replica is the replica's `host:port` (an IPv6 host in brackets).
	Replica string `json:"replica"`
	// State is healthy, unhealthy, ejected or draining.
	State ReplicaState `json:"state"`
	// InFlight counts this gateway's requests on the replica now.
	InFlight int64 `json:"in_flight"`
	// Waiting counts this gateway's requests on the replica that have no
	// first byte yet (waiting for their prefill).
	Waiting int64 `json:"waiting"`
	// Requests and Failures count this gateway's attempts on the replica
	// since it joined the pool, and those that failed (connect failure,
	// 5xx, no headers within the arm's timeout).
	Requests int64 `json:"requests"`
	Failures int64 `json:"failures"`
	// ConsecutiveFailures is the current run of failed attempts.
	ConsecutiveFailures int64 `json:"consecutive_failures"`
	// EjectedUntil is when an ejection ends; nil when not ejected.
	EjectedUntil *time.Time `json:"ejected_until"`
	// LastError is the last failure's message, at most MaxLastErrorLen
	// bytes; "" when none.
	LastError string `json:"last_error"`
	// Engine holds the engine's gauges as last scraped (engine_metrics);
	// nil without scraping, or when the scrape failed or is stale.
	Engine *EngineGauges `json:"engine"`
}

// EngineGauges are a replica's engine metrics as last scraped (SPEC §6.7
// "Engine metrics"), each summed over its label series.
type EngineGauges struct {
	// Running is the requests the engine runs (vllm:num_requests_running,
	// sglang:num_running_reqs).
	Running float64 `json:"running"`
	// Waiting is the engine's waiting queue (vllm:num_requests_waiting,
	// sglang:num_queue_reqs).
	Waiting float64 `json:"waiting"`
	// KVCacheUsage is the share of the KV cache in use, 0 to 1 per
	// engine (vllm:kv_cache_usage_perc, sglang:token_usage).
	KVCacheUsage float64 `json:"kv_cache_usage"`
	// ScrapedAt is when the gauges were read.
	ScrapedAt time.Time `json:"scraped_at"`
}

// Limits of a ReplicasStatus (SPEC §6.7).
const (
	// MaxReplicasPerPart is the most replicas one event holds, over all
	// its arms; Split cuts a larger view into parts.
	MaxReplicasPerPart = 256
	// MaxLastErrorLen bounds ReplicaStatus.LastError, so a part of 256
	// replicas stays well under the gateway's 1 MB NATS payload.
	MaxLastErrorLen = 1024
)

// EventType returns TypeReplicasStatus.
func (*ReplicasStatus) EventType() string { return TypeReplicasStatus }

// Subject returns ReplicasSubject(s.Deployment).
func (s *ReplicasStatus) Subject() string { return ReplicasSubject(s.Deployment) }

// Split returns s as the events to publish: s itself (Part 1 of 1) when
// it holds at most MaxReplicasPerPart replicas, else parts of at most that
// many, in order, each with Part and Parts set and the same Deployment,
// Gateway and Time. An arm whose replicas span parts is in each of them
// with its share; an arm without replicas is in the first part. The parts
// share s's replica values (not copied); s is not changed.
func (s *ReplicasStatus) Split() []*ReplicasStatus {
	total := 0
	for _, a := range s.Arms {
		total += len(a.Replicas)
	}
	if total <= MaxReplicasPerPart {
		one := *s
		one.Part, one.Parts = 1, 1
		if one.Arms == nil {
			one.Arms = []ArmReplicas{}
		}
		return []*ReplicasStatus{&one}
	}
	var parts []*ReplicasStatus
	cur := &ReplicasStatus{Deployment: s.Deployment, Gateway: s.Gateway, Time: s.Time, Arms: []ArmReplicas{}}
	room := MaxReplicasPerPart
	for _, a := range s.Arms {
		rest := a.Replicas
		if len(rest) == 0 {
			cur.Arms = append(cur.Arms, ArmReplicas{Arm: a.Arm, Balance: a.Balance, Replicas: []ReplicaStatus{}})
			continue
		}
		for len(rest) > 0 {
			if room == 0 {
				parts = append(parts, cur)
				cur = &ReplicasStatus{Deployment: s.Deployment, Gateway: s.Gateway, Time: s.Time, Arms: []ArmReplicas{}}
				room = MaxReplicasPerPart
			}
			n := min(room, len(rest))
			cur.Arms = append(cur.Arms, ArmReplicas{Arm: a.Arm, Balance: a.Balance, Replicas: rest[:n:n]})
			rest, room = rest[n:], room-n
		}
	}
	parts = append(parts, cur)
	for i, p := range parts {
		p.Part, p.Parts = i+1, len(parts)
	}
	return parts
}

// Check reports every rule s breaks: a deployment that is not a subject
// token, an empty or overlong gateway, no time, a part outside 1…parts,
// null arms or replicas, an arm other than primary or gray or one listed
// twice, an unknown balancing policy or replica state, more than
// MaxReplicasPerPart replicas, a replica name that is overlong or holds a
// control character or is listed twice in its arm, negative counts, a
// last error longer than MaxLastErrorLen, and engine gauges that are
// negative, not finite or without their scrape time.
func (s *ReplicasStatus) Check() error {
	var p problems
	p.source(s.Deployment, s.Gateway)
	if s.Time.IsZero() {
		p.add("time is missing")
	}
	if s.Parts < 1 || s.Part < 1 || s.Part > s.Parts {
		p.add("part %d of parts %d is not within 1…parts", s.Part, s.Parts)
	}
	if s.Arms == nil {
		p.add("arms is null (use an empty list)")
	}
	total := 0
	seenArm := make(map[Arm]bool, 2)
	for i := range s.Arms {
		a := &s.Arms[i]
		f := "arms[" + strconv.Itoa(i) + "]."
		if !slices.Contains(PoolArms, a.Arm) {
			p.add("%sarm %q is not primary or gray", f, a.Arm)
		} else if seenArm[a.Arm] {
			p.add("%sarm %q is listed twice", f, a.Arm)
		}
		seenArm[a.Arm] = true
		if !a.Balance.Valid() {
			p.add("%sbalance %q is not round_robin, least_loaded or prefix", f, a.Balance)
		}
		if a.Replicas == nil {
			p.add("%sreplicas is null (use an empty list)", f)
		}
		total += len(a.Replicas)
		seen := make(map[string]bool, len(a.Replicas))
		for j := range a.Replicas {
			checkReplica(&p, f+"replicas["+strconv.Itoa(j)+"].", &a.Replicas[j], seen)
		}
	}
	if total > MaxReplicasPerPart {
		p.add("%d replicas in one part; at most %d (Split the status)", total, MaxReplicasPerPart)
	}
	return p.err(TypeReplicasStatus)
}

func checkReplica(p *problems, f string, r *ReplicaStatus, seen map[string]bool) {
	p.replica(f+"replica", r.Replica)
	if seen[r.Replica] {
		p.add("%sreplica %q is listed twice", f, r.Replica)
	}
	seen[r.Replica] = true
	if !r.State.Valid() {
		p.add("%sstate %q is not healthy, unhealthy, ejected or draining", f, r.State)
	}
	p.countAt(f, "in_flight", "", r.InFlight)
	p.countAt(f, "waiting", "", r.Waiting)
	p.countAt(f, "requests", "", r.Requests)
	p.countAt(f, "failures", "", r.Failures)
	p.countAt(f, "consecutive_failures", "", r.ConsecutiveFailures)
	if r.EjectedUntil != nil && r.EjectedUntil.IsZero() {
		p.add("%sejected_until is the zero time (use null)", f)
	}
	if len(r.LastError) > MaxLastErrorLen {
		p.add("%slast_error is longer than %d bytes", f, MaxLastErrorLen)
	}
	if e := r.Engine; e != nil {
		for _, g := range []struct {
			name string
			v    float64
		}{{"running", e.Running}, {"waiting", e.Waiting}, {"kv_cache_usage", e.KVCacheUsage}} {
			if math.IsNaN(g.v) || math.IsInf(g.v, 0) || g.v < 0 {
				p.add("%sengine.%s must be a finite non-negative number, got %v", f, g.name, g.v)
			}
		}
		if e.ScrapedAt.IsZero() {
			p.add("%sengine.scraped_at is missing", f)
		}
	}
}
