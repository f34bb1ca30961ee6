package events

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/schemas/histogram"
)

// StatsInterval is the data of a graygate.stats.interval event (SPEC §7
// "Per-arm statistics"): what one gateway saw of one deployment's attempts
// that ended in one stats_interval, published on StatsSubject(Deployment)
// with the id StatsID(Gateway, Deployment, IntervalStart).
type StatsInterval struct {
	// Deployment the attempts belong to.
	Deployment string `json:"deployment"`
	// Gateway is the publishing gateway: hostname "/" a random id drawn at start.
	Gateway string `json:"gateway"`
	// IntervalStart is the interval's start, UTC, a whole multiple of
	// IntervalSeconds since the Unix epoch.
	IntervalStart time.Time `json:"interval_start"`
	// IntervalSeconds is gateway.stats_interval in seconds.
	IntervalSeconds float64 `json:"interval_seconds"`
	// Arms holds one entry per (arm, stream, endpoint, band, cached) with
	// attempts.
	Arms []ArmStats `json:"arms"`
}

// ArmStats aggregates the attempts of one arm, stream class, endpoint,
// context band and cache class: the entry's key is (Arm, Stream, Endpoint,
// Band, Cached).
type ArmStats struct {
	// Arm is ArmPrimary, ArmGray or ArmShadow: for a fallback the gray
	// attempt counts in gray and primary's answer in primary.
	Arm Arm `json:"arm"`
	// Stream is true for streamed attempts.
	Stream bool `json:"stream"`
	// Endpoint the attempts were made on.
	Endpoint Endpoint `json:"endpoint"`
	// Band is the first context band (SPEC §5) the attempts' request
	// matched, in config order: a band name ([A-Za-z0-9_-]+, at most
	// MaxBandLen bytes), or "" when it matched none or no bands are
	// configured. (rev. 4) Always written; a statistic of an older
	// gateway, which did not write it, reads as band "" (so the JSON
	// Schema does not require it: schema:"optional").
	Band string `json:"band" schema:"optional"`
	// Cached is true for attempts whose engine reported at least half of
	// the prompt's tokens as cached (usage.prompt_tokens_details.
	// cached_tokens ≥ prompt_tokens/2, prompt_tokens > 0), false when it
	// reported fewer or nothing. (rev. 4) Always written; a statistic of
	// an older gateway, without it, reads as not cached.
	Cached bool `json:"cached" schema:"optional"`
	// ArmPromptVersion and ArmPromptHash name the arm's prompt (SPEC §6.6),
	// "" when it has none; the hash is 64 lowercase hex digits.
	ArmPromptVersion string `json:"arm_prompt_version"`
	ArmPromptHash    string `json:"arm_prompt_hash"`
	// ArmFingerprint is what the arm is (SPEC §7 "Arm fingerprint"): the
	// first 16 hex digits of the SHA-256 of its upstream identity as
	// configured (config.Upstream.Fingerprint). "" in the statistics of
	// gateways older than rev. 3, which did not write it. Shadow entries
	// carry the gray arm's.
	ArmFingerprint string `json:"arm_fingerprint" schema:"optional"`
	// Requests counts the attempts; the outcomes sum to it.
	Requests int64    `json:"requests"`
	Outcomes Outcomes `json:"outcomes"`
	// PromptTokens and CompletionTokens count the attempts that returned an
	// answer (Outcomes.Answered: ok, schema_violation, schema_violation_both
	// and truncated).
	PromptTokens     Moments `json:"prompt_tokens"`
	CompletionTokens Moments `json:"completion_tokens"`
	// TTFT holds the streamed attempts' time to first output, Latency every
	// attempt's whole time, in milliseconds; a timeout before the point
	// counts in Overflow; cancelled attempts are in neither.
	TTFT    histogram.Log `json:"ttft_ms"`
	Latency histogram.Log `json:"latency_ms"`
	// ToolLoops counts attempts with more than ToolLoopSteps tool steps or
	// a repeated tool call.
	ToolLoops int64 `json:"tool_loops"`
	// LateHeaders counts the answered attempts (Outcomes.Answered) whose
	// response headers came after the deployment's rollout timeout: in
	// stream_validation observe streams, primary's attempts that gray
	// would have had to beat (SPEC §9 rev. 3, gate 5 counts them as
	// timeouts). 0 in the statistics of gateways older than rev. 3.
	LateHeaders int64 `json:"late_headers" schema:"optional"`
	// ToolSteps sums the tool steps of the attempts that returned an answer.
	ToolSteps CountSum `json:"tool_steps"`
}

// ToolLoopSteps is the tool-step count above which an attempt counts as a
// tool loop (SPEC §9, gate 4).
const ToolLoopSteps = 3

// Outcomes counts attempts by how they ended (SPEC §7 "Attempt outcomes").
type Outcomes struct {
	OK              int64 `json:"ok"`
	SchemaViolation int64 `json:"schema_violation"`
	InvalidJSON     int64 `json:"invalid_json"`
	Upstream4xx     int64 `json:"upstream_4xx"`
	Upstream5xx     int64 `json:"upstream_5xx"`
	Timeout         int64 `json:"timeout"`
	UpstreamError   int64 `json:"upstream_error"`
	Cancelled       int64 `json:"cancelled"`
	// SchemaViolationBoth and Truncated are the rev. 3 outcomes: they
	// count as attempts in gates 2 and 5, never as failures.
	SchemaViolationBoth int64 `json:"schema_violation_both" schema:"optional"`
	Truncated           int64 `json:"truncated" schema:"optional"`
}

// Add counts one attempt that ended in o (an invalid o is not counted).
func (c *Outcomes) Add(o Outcome) {
	if p := c.field(o); p != nil {
		*p++
	}
}

// Count returns how many attempts ended in o.
func (c *Outcomes) Count(o Outcome) int64 {
	if p := c.field(o); p != nil {
		return *p
	}
	return 0
}

// field returns the counter of o, nil for an invalid o. The counters are
// in the order of AllOutcomes.
func (c *Outcomes) field(o Outcome) *int64 {
	i := slices.Index(AllOutcomes, o)
	if i < 0 {
		return nil
	}
	return [...]*int64{&c.OK, &c.SchemaViolation, &c.InvalidJSON, &c.Upstream4xx, &c.Upstream5xx, &c.Timeout,
		&c.UpstreamError, &c.Cancelled, &c.SchemaViolationBoth, &c.Truncated}[i]
}

// Sum returns the number of attempts counted.
func (c *Outcomes) Sum() int64 {
	return c.OK + c.SchemaViolation + c.InvalidJSON + c.Upstream4xx + c.Upstream5xx + c.Timeout + c.UpstreamError + c.Cancelled +
		c.SchemaViolationBoth + c.Truncated
}

// Answered returns the attempts that returned an answer whose tokens
// count: ok, schema_violation, schema_violation_both and truncated.
func (c *Outcomes) Answered() int64 {
	return c.OK + c.SchemaViolation + c.SchemaViolationBoth + c.Truncated
}

// Merge adds o to c.
func (c *Outcomes) Merge(o *Outcomes) {
	c.OK += o.OK
	c.SchemaViolation += o.SchemaViolation
	c.InvalidJSON += o.InvalidJSON
	c.Upstream4xx += o.Upstream4xx
	c.Upstream5xx += o.Upstream5xx
	c.Timeout += o.Timeout
	c.UpstreamError += o.UpstreamError
	c.Cancelled += o.Cancelled
	c.SchemaViolationBoth += o.SchemaViolationBoth
	c.Truncated += o.Truncated
}

// Moments summarises a set of non-negative values: count, sum, sum of
// squares, minimum and maximum (all 0 when Count is 0).
type Moments struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
	SumSq float64 `json:"sum_sq"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
}

// Add counts one value.
func (m *Moments) Add(v float64) {
	if m.Count == 0 || v < m.Min {
		m.Min = v
	}
	if m.Count == 0 || v > m.Max {
		m.Max = v
	}
	m.Count++
	m.Sum += v
	m.SumSq += v * v
}

// Merge adds o to m.
func (m *Moments) Merge(o *Moments) {
	if o.Count == 0 {
		return
	}
	if m.Count == 0 || o.Min < m.Min {
		m.Min = o.Min
	}
	if m.Count == 0 || o.Max > m.Max {
		m.Max = o.Max
	}
	m.Count += o.Count
	m.Sum += o.Sum
	m.SumSq += o.SumSq
}

// Mean returns Sum/Count, 0 when empty.
func (m *Moments) Mean() float64 {
	if m.Count == 0 {
		return 0
	}
	return m.Sum / float64(m.Count)
}

// Variance returns the sample variance (n−1 denominator), 0 below two values.
func (m *Moments) Variance() float64 {
	if m.Count < 2 {
		return 0
	}
	n := float64(m.Count)
	v := (m.SumSq - m.Sum*m.Sum/n) / (n - 1)
	return max(v, 0)
}

// CountSum is a count and a sum.
type CountSum struct {
	Count int64 `json:"count"`
	Sum   int64 `json:"sum"`
}

// Merge adds every counter, moment and histogram of o to a (the key fields
// and the fingerprint are left as they are).
func (a *ArmStats) Merge(o *ArmStats) {
	a.Requests += o.Requests
	a.Outcomes.Merge(&o.Outcomes)
	a.PromptTokens.Merge(&o.PromptTokens)
	a.CompletionTokens.Merge(&o.CompletionTokens)
	a.TTFT.Merge(&o.TTFT)
	a.Latency.Merge(&o.Latency)
	a.ToolLoops += o.ToolLoops
	a.LateHeaders += o.LateHeaders
	a.ToolSteps.Count += o.ToolSteps.Count
	a.ToolSteps.Sum += o.ToolSteps.Sum
}

// EventType returns TypeStatsInterval.
func (*StatsInterval) EventType() string { return TypeStatsInterval }

// Subject returns StatsSubject(s.Deployment).
func (s *StatsInterval) Subject() string { return StatsSubject(s.Deployment) }

// ID returns the event id of s: StatsID(s.Gateway, s.Deployment, s.IntervalStart).
func (s *StatsInterval) ID() string { return StatsID(s.Gateway, s.Deployment, s.IntervalStart) }

// StatsID is the event id of a statistic: the UUIDv5, in the URL namespace,
// of "graygate:stats/<gateway>/<deployment>/<interval_start RFC 3339 UTC>",
// so a statistic spooled and republished keeps its id and counts once.
func StatsID(gateway, deployment string, intervalStart time.Time) string {
	name := "graygate:stats/" + gateway + "/" + deployment + "/" + intervalStart.UTC().Format(time.RFC3339Nano)
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(name)).String()
}

// MaxStatsFuture is how far in the future a statistic may be dated;
// consumers skip and count a later one (SPEC §7).
const MaxStatsFuture = 5 * time.Minute

// MaxGatewayLen bounds the gateway field.
const MaxGatewayLen = 255

// MaxBandLen bounds a context band's name, in the configuration (which
// refuses a longer one) and in a statistics entry's band.
const MaxBandLen = 128

// ValidBand reports whether name is a context band's name as a statistics
// entry may carry it: [A-Za-z0-9_-]+ (the config rule), at most
// MaxBandLen bytes. An entry without a band has "", which is not a name.
func ValidBand(name string) bool {
	if name == "" || len(name) > MaxBandLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Check reports every rule s breaks: a deployment that is not a subject
// token, an empty or overlong gateway, an interval that is not positive or
// a start that is not a multiple of it, an arm entry with an arm other than
// primary, gray or shadow, an unknown endpoint, a band that is neither ""
// nor a band name of at most MaxBandLen bytes, a repeated (arm, stream,
// endpoint, band, cached), a prompt hash that is not 64 lowercase hex digits, a
// fingerprint that is neither empty nor 16 lowercase hex digits, no
// attempts, outcomes that do not sum to requests, token moments counting
// more attempts than returned an answer or breaking their own rules,
// histograms holding more attempts than there are, a TTFT on a non-streamed
// entry, tool counts above requests, and late headers on more attempts
// than were answered.
func (s *StatsInterval) Check() error {
	var p problems
	p.source(s.Deployment, s.Gateway)
	if math.IsNaN(s.IntervalSeconds) || math.IsInf(s.IntervalSeconds, 0) || s.IntervalSeconds <= 0 || s.IntervalSeconds > 3600 {
		p.add("interval_seconds must be in (0, 3600], got %v", s.IntervalSeconds)
	} else if s.IntervalStart.IsZero() {
		p.add("interval_start is missing")
	} else {
		step := time.Duration(math.Round(s.IntervalSeconds * 1e9))
		if step <= 0 || s.IntervalStart.UnixNano()%int64(step) != 0 {
			p.add("interval_start %s is not a multiple of %v since the Unix epoch", s.IntervalStart.UTC().Format(time.RFC3339Nano), step)
		}
	}
	if len(s.Arms) == 0 {
		p.add("arms is empty (a deployment without attempts publishes nothing)")
	}
	type key struct {
		arm      Arm
		stream   bool
		endpoint Endpoint
		band     string
		cached   bool
	}
	seen := make(map[key]bool, len(s.Arms))
	for i := range s.Arms {
		a := &s.Arms[i]
		f := "arms[" + strconv.Itoa(i) + "]."
		if !slices.Contains(StatsArms, a.Arm) {
			p.add("%sarm %q is not primary, gray or shadow", f, a.Arm)
		}
		if !a.Endpoint.Valid() {
			p.add("%sendpoint %q is not chat, completions, responses or embeddings", f, a.Endpoint)
		}
		if a.Band != "" {
			p.band(f+"band", a.Band)
		}
		k := key{a.Arm, a.Stream, a.Endpoint, a.Band, a.Cached}
		if seen[k] {
			p.add("%s(arm %s, stream %v, endpoint %s, band %q, cached %v) appears twice", f, a.Arm, a.Stream, a.Endpoint, a.Band, a.Cached)
		}
		seen[k] = true
		if a.ArmPromptHash != "" && !isHex(a.ArmPromptHash, 64) {
			p.add("%sarm_prompt_hash is not 64 lowercase hex digits", f)
		}
		if a.ArmFingerprint != "" && !isHex(a.ArmFingerprint, FingerprintLen) {
			p.add("%sarm_fingerprint is not %d lowercase hex digits", f, FingerprintLen)
		}
		if len(a.ArmPromptVersion) > 128 {
			p.add("%sarm_prompt_version is longer than 128 bytes", f)
		}
		a.check(&p, f)
	}
	return p.err(TypeStatsInterval)
}

func (a *ArmStats) check(p *problems, f string) {
	o := &a.Outcomes
	for _, out := range AllOutcomes {
		if n := o.Count(out); n < 0 {
			p.count(f+"outcomes."+string(out), n)
		}
	}
	if a.Requests <= 0 {
		p.add("%srequests must be positive, got %d", f, a.Requests)
	}
	if sum := o.Sum(); sum != a.Requests {
		p.add("%soutcomes sum to %d, not requests %d", f, sum, a.Requests)
	}
	answered := o.Answered()
	a.PromptTokens.check(p, f, "prompt_tokens", answered)
	a.CompletionTokens.check(p, f, "completion_tokens", answered)
	if err := a.TTFT.Check(); err != nil {
		p.add("%sttft_ms: %v", f, err)
	}
	if err := a.Latency.Check(); err != nil {
		p.add("%slatency_ms: %v", f, err)
	}
	measured := a.Requests - o.Cancelled
	if n := a.Latency.Total(); n > uint64(max(measured, 0)) {
		p.add("%slatency_ms holds %d attempts, more than the %d not cancelled", f, n, measured)
	}
	if n := a.TTFT.Total(); n > uint64(max(measured, 0)) {
		p.add("%sttft_ms holds %d attempts, more than the %d not cancelled", f, n, measured)
	} else if n > 0 && !a.Stream {
		p.add("%sttft_ms holds %d attempts of a non-streamed entry (only streams record TTFT)", f, n)
	}
	p.countAt(f, "tool_loops", "", a.ToolLoops)
	if a.ToolLoops > a.Requests {
		p.add("%stool_loops %d is more than requests %d", f, a.ToolLoops, a.Requests)
	}
	p.countAt(f, "late_headers", "", a.LateHeaders)
	if a.LateHeaders > answered {
		p.add("%slate_headers %d is more than the %d attempts that returned an answer", f, a.LateHeaders, answered)
	}
	p.countAt(f, "tool_steps.count", "", a.ToolSteps.Count)
	p.countAt(f, "tool_steps.sum", "", a.ToolSteps.Sum)
	if a.ToolSteps.Count > a.Requests {
		p.add("%stool_steps.count %d is more than requests %d", f, a.ToolSteps.Count, a.Requests)
	}
}

func (m *Moments) check(p *problems, prefix, name string, most int64) {
	p.countAt(prefix, name, ".count", m.Count)
	if m.Count > most {
		p.add("%s%s.count %d is more than the %d attempts that returned an answer", prefix, name, m.Count, most)
	}
	p.millisAt(prefix, name, ".sum", m.Sum)
	p.millisAt(prefix, name, ".sum_sq", m.SumSq)
	p.millisAt(prefix, name, ".min", m.Min)
	p.millisAt(prefix, name, ".max", m.Max)
	if m.Count == 0 && (m.Sum != 0 || m.SumSq != 0 || m.Min != 0 || m.Max != 0) {
		p.add("%s%s has values but count 0", prefix, name)
	}
	if m.Count > 0 && m.Min > m.Max {
		p.add("%s%s.min %v is above max %v", prefix, name, m.Min, m.Max)
	}
}

// FingerprintLen is the length of an arm fingerprint in hex digits.
const FingerprintLen = 16

// isHex reports whether s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
