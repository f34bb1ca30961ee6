package events

import (
	"strconv"
	"time"

	"github.com/graygate/graygate/schemas/histogram"
)

// decodeStats is DecodeEvent's fast path for a statistic: one hand-written
// pass over b, no reflection, about eight times faster than json.Unmarshal
// on a statistic with four entries of 150-bin histograms (the analyzer
// reads 2,000 a second, SPEC §12). It reads only the shape a gateway
// writes: the exact field names, each at most once, strings without
// escapes or non-ASCII bytes, no null, integers where the field is one.
// Anything else — including anything encoding/json would read differently
// or refuse — returns false, and DecodeEvent takes the slow path, whose
// results and errors are the reference (FuzzDecodeEvent holds them
// together). data is the data object's bytes, as scanTop found them.
func decodeStats(b, data []byte) (Envelope, Data, bool) {
	p := parser{b: b}
	var (
		env  Envelope
		s    = new(StatsInterval)
		seen uint8
	)
	ok := p.object(func(key []byte) bool {
		var bit uint8
		switch string(key) {
		case "specversion":
			bit, env.SpecVersion = 1, p.str()
		case "id":
			bit, env.ID = 2, p.str()
		case "source":
			bit, env.Source = 4, p.str()
		case "type":
			bit, env.Type = 8, p.str()
		case "time":
			bit = 16
			p.time(&env.Time)
		case "datacontenttype":
			bit, env.DataContentType = 32, p.str()
		case "data":
			bit = 64
			p.statsData(s)
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return !p.bad
	})
	if !ok || !p.end() || seen != 127 || env.SpecVersion != SpecVersion || env.Source == "" ||
		env.Type != TypeStatsInterval || env.Time.IsZero() || env.DataContentType != ContentType ||
		checkID(env.ID, env.Type) != nil || s.Check() != nil {
		return Envelope{}, nil, false
	}
	env.Time = env.Time.UTC()
	env.Data = data
	return env, s, true
}

// statsData reads the data object of a statistic.
func (p *parser) statsData(s *StatsInterval) {
	var seen uint8
	ok := p.object(func(key []byte) bool {
		var bit uint8
		switch string(key) {
		case "deployment":
			bit, s.Deployment = 1, p.str()
		case "gateway":
			bit, s.Gateway = 2, p.str()
		case "interval_start":
			bit = 4
			p.time(&s.IntervalStart)
		case "interval_seconds":
			bit, s.IntervalSeconds = 8, p.float()
		case "arms":
			bit = 16
			s.Arms = make([]ArmStats, 0, 4)
			p.array(func() bool {
				s.Arms = append(s.Arms, ArmStats{})
				p.arm(&s.Arms[len(s.Arms)-1])
				return !p.bad
			})
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return !p.bad
	})
	if !ok {
		p.bad = true
	}
}

// arm reads one entry of arms.
func (p *parser) arm(a *ArmStats) {
	var seen uint16
	ok := p.object(func(key []byte) bool {
		var bit uint16
		switch string(key) {
		case "arm":
			bit, a.Arm = 1, Arm(p.str())
		case "stream":
			bit, a.Stream = 2, p.bool()
		case "endpoint":
			bit, a.Endpoint = 4, Endpoint(p.str())
		case "arm_prompt_version":
			bit, a.ArmPromptVersion = 8, p.str()
		case "arm_prompt_hash":
			bit, a.ArmPromptHash = 16, p.str()
		case "requests":
			bit, a.Requests = 32, p.int()
		case "outcomes":
			bit = 64
			p.outcomes(&a.Outcomes)
		case "prompt_tokens":
			bit = 128
			p.moments(&a.PromptTokens)
		case "completion_tokens":
			bit = 256
			p.moments(&a.CompletionTokens)
		case "ttft_ms":
			bit = 512
			p.histogram(&a.TTFT)
		case "latency_ms":
			bit = 1024
			p.histogram(&a.Latency)
		case "tool_loops":
			bit, a.ToolLoops = 2048, p.int()
		case "tool_steps":
			bit = 4096
			var seenSteps uint8
			if !p.object(func(key []byte) bool {
				var bit uint8
				switch string(key) {
				case "count":
					bit, a.ToolSteps.Count = 1, p.int()
				case "sum":
					bit, a.ToolSteps.Sum = 2, p.int()
				default:
					return false
				}
				if seenSteps&bit != 0 {
					return false
				}
				seenSteps |= bit
				return !p.bad
			}) {
				p.bad = true
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return !p.bad
	})
	if !ok {
		p.bad = true
	}
}

func (p *parser) outcomes(o *Outcomes) {
	var seen uint16
	ok := p.object(func(key []byte) bool {
		var f *int64
		var bit uint16
		switch string(key) {
		case "ok":
			f, bit = &o.OK, 1
		case "schema_violation":
			f, bit = &o.SchemaViolation, 2
		case "invalid_json":
			f, bit = &o.InvalidJSON, 4
		case "upstream_4xx":
			f, bit = &o.Upstream4xx, 8
		case "upstream_5xx":
			f, bit = &o.Upstream5xx, 16
		case "timeout":
			f, bit = &o.Timeout, 32
		case "upstream_error":
			f, bit = &o.UpstreamError, 64
		case "cancelled":
			f, bit = &o.Cancelled, 128
		case "schema_violation_both":
			f, bit = &o.SchemaViolationBoth, 256
		case "truncated":
			f, bit = &o.Truncated, 512
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		*f = p.int()
		return !p.bad
	})
	if !ok {
		p.bad = true
	}
}

func (p *parser) moments(m *Moments) {
	var seen uint8
	ok := p.object(func(key []byte) bool {
		var bit uint8
		switch string(key) {
		case "count":
			bit, m.Count = 1, p.int()
		case "sum":
			bit, m.Sum = 2, p.float()
		case "sum_sq":
			bit, m.SumSq = 4, p.float()
		case "min":
			bit, m.Min = 8, p.float()
		case "max":
			bit, m.Max = 16, p.float()
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return !p.bad
	})
	if !ok {
		p.bad = true
	}
}

// histogram reads a histogram.Log with its UnmarshalJSON's rules: every
// field present, gamma exactly histogram.Gamma, no more bins than a
// histogram can have, every counted bin in range.
func (p *parser) histogram(h *histogram.Log) {
	var (
		seen   uint8
		counts []uint64
		w      histogram.Log
	)
	ok := p.object(func(key []byte) bool {
		var bit uint8
		switch string(key) {
		case "gamma":
			bit = 1
			if p.float() != histogram.Gamma {
				return false
			}
		case "zero":
			bit, w.Zero = 2, p.uint()
		case "offset":
			bit, w.Offset = 4, int(p.int())
		case "counts":
			bit = 8
			counts = p.counts(make([]uint64, 0, 160))
		case "overflow":
			bit, w.Overflow = 16, p.uint()
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return !p.bad
	})
	if !ok || seen != 31 || len(counts) > histogram.MaxBin-histogram.MinBin+1 {
		p.bad = true
		return
	}
	if len(counts) > 0 {
		w.Counts = counts
	} else {
		w.Offset = 0
	}
	if w.Check() != nil {
		p.bad = true
		return
	}
	*h = w
}

// counts reads an array of unsigned integers (a histogram's counts, the
// bulk of a statistic) into dst in one loop.
func (p *parser) counts(dst []uint64) []uint64 {
	p.space()
	if p.bad || p.i >= len(p.b) || p.b[p.i] != '[' {
		p.bad = true
		return nil
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return dst
	}
	b := p.b
	for {
		p.space()
		j := p.i
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			p.bad = true
			return nil
		}
		var v uint64
		if b[j] == '0' {
			j++
		} else {
			for j < len(b) && b[j] >= '0' && b[j] <= '9' && j-p.i < 19 {
				v = v*10 + uint64(b[j]-'0')
				j++
			}
		}
		if j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
			// Longer, or not an integer: the general path decides.
			v = p.uint()
			j = p.i
			if p.bad {
				return nil
			}
		}
		dst = append(dst, v)
		p.i = j
		p.space()
		if p.i >= len(b) {
			p.bad = true
			return nil
		}
		switch b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return dst
		default:
			p.bad = true
			return nil
		}
	}
}

// parser is a cursor over JSON text that reads only the plain forms
// decodeStats accepts; bad is set at the first thing it does not.
type parser struct {
	b   []byte
	i   int
	bad bool
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (p *parser) end() bool {
	p.space()
	return !p.bad && p.i == len(p.b)
}

// object reads an object, calling field with each key (the cursor then at
// its value); field returns false to give up. It returns false on any
// problem.
func (p *parser) object(field func(key []byte) bool) bool {
	p.space()
	if p.bad || p.i >= len(p.b) || p.b[p.i] != '{' {
		p.bad = true
		return false
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return true
	}
	for {
		p.space()
		key := p.rawStr()
		p.space()
		if p.bad || p.i >= len(p.b) || p.b[p.i] != ':' {
			p.bad = true
			return false
		}
		p.i++
		p.space()
		if !field(key) || p.bad {
			p.bad = true
			return false
		}
		p.space()
		if p.i >= len(p.b) {
			p.bad = true
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			p.bad = true
			return false
		}
	}
}

// array reads an array, calling elem with the cursor at each element.
func (p *parser) array(elem func() bool) {
	p.space()
	if p.bad || p.i >= len(p.b) || p.b[p.i] != '[' {
		p.bad = true
		return
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return
	}
	for {
		p.space()
		if !elem() || p.bad {
			p.bad = true
			return
		}
		p.space()
		if p.i >= len(p.b) {
			p.bad = true
			return
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return
		default:
			p.bad = true
			return
		}
	}
}

// rawStr reads a string of printable ASCII without escapes and returns its
// bytes (inside b).
func (p *parser) rawStr() []byte {
	if p.bad || p.i >= len(p.b) || p.b[p.i] != '"' {
		p.bad = true
		return nil
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return p.b[start:j]
		case c < 0x20 || c >= 0x80 || c == '\\':
			p.bad = true
			return nil
		}
	}
	p.bad = true
	return nil
}

func (p *parser) str() string { return string(p.rawStr()) }

// time reads a quoted time with time.Time's own UnmarshalJSON.
func (p *parser) time(t *time.Time) {
	start := p.i
	p.rawStr()
	if p.bad || t.UnmarshalJSON(p.b[start:p.i]) != nil {
		p.bad = true
	}
}

func (p *parser) bool() bool {
	switch {
	case p.lit("true"):
		return true
	case p.lit("false"):
		return false
	}
	p.bad = true
	return false
}

func (p *parser) lit(s string) bool {
	if p.bad || len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// number returns the text of a JSON number and whether it is an integer
// (no fraction, no exponent).
func (p *parser) number() ([]byte, bool) {
	if p.bad {
		return nil, false
	}
	start, j := p.i, p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	switch {
	case j < len(p.b) && p.b[j] == '0':
		j++
	case j < len(p.b) && p.b[j] >= '1' && p.b[j] <= '9':
		for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
			j++
		}
	default:
		p.bad = true
		return nil, false
	}
	integer := true
	if j < len(p.b) && p.b[j] == '.' {
		integer = false
		j++
		if !digits(p.b, &j) {
			p.bad = true
			return nil, false
		}
	}
	if j < len(p.b) && (p.b[j] == 'e' || p.b[j] == 'E') {
		integer = false
		j++
		if j < len(p.b) && (p.b[j] == '+' || p.b[j] == '-') {
			j++
		}
		if !digits(p.b, &j) {
			p.bad = true
			return nil, false
		}
	}
	p.i = j
	return p.b[start:j], integer
}

func digits(b []byte, j *int) bool {
	start := *j
	for *j < len(b) && b[*j] >= '0' && b[*j] <= '9' {
		*j++
	}
	return *j > start
}

func (p *parser) int() int64 {
	s, integer := p.number()
	if p.bad || !integer {
		p.bad = true
		return 0
	}
	if v, ok := small(s); ok {
		return v
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		p.bad = true
	}
	return v
}

func (p *parser) uint() uint64 {
	s, integer := p.number()
	if p.bad || !integer {
		p.bad = true
		return 0
	}
	if v, ok := small(s); ok && v >= 0 && s[0] != '-' {
		return uint64(v)
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		p.bad = true
	}
	return v
}

// small converts a JSON integer of at most 18 digits (no overflow
// possible) without strconv; false for a longer one.
func small(s []byte) (int64, bool) {
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range s {
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

func (p *parser) float() float64 {
	s, _ := p.number()
	if p.bad {
		return 0
	}
	v, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		p.bad = true
	}
	return v
}
