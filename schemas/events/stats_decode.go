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
		env Envelope
		s   = new(StatsInterval)
	)
	seen := p.object(func(key []byte) (n int) {
		switch string(key) {
		case "specversion":
			n, env.SpecVersion = 0, p.str()
		case "id":
			n, env.ID = 1, p.str()
		case "source":
			n, env.Source = 2, p.str()
		case "type":
			n, env.Type = 3, p.str()
		case "time":
			n = 4
			p.time(&env.Time)
		case "datacontenttype":
			n, env.DataContentType = 5, p.str()
		case "data":
			n = 6
			p.statsData(s)
		default:
			n = -1
		}
		return n
	})
	if !p.end() || seen != 1<<7-1 || env.SpecVersion != SpecVersion || env.Source == "" ||
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
	p.object(func(key []byte) (n int) {
		switch string(key) {
		case "deployment":
			n, s.Deployment = 0, p.str()
		case "gateway":
			n, s.Gateway = 1, p.str()
		case "interval_start":
			n = 2
			p.time(&s.IntervalStart)
		case "interval_seconds":
			n, s.IntervalSeconds = 3, p.float()
		case "arms":
			n = 4
			s.Arms = make([]ArmStats, 0, 4)
			p.array(func() {
				s.Arms = append(s.Arms, ArmStats{})
				p.arm(&s.Arms[len(s.Arms)-1])
			})
		default:
			n = -1
		}
		return n
	})
}

// arm reads one entry of arms.
func (p *parser) arm(a *ArmStats) {
	p.object(func(key []byte) (n int) {
		switch string(key) {
		case "arm":
			n, a.Arm = 0, Arm(p.str())
		case "stream":
			n, a.Stream = 1, p.bool()
		case "endpoint":
			n, a.Endpoint = 2, Endpoint(p.str())
		case "arm_prompt_version":
			n, a.ArmPromptVersion = 3, p.str()
		case "arm_prompt_hash":
			n, a.ArmPromptHash = 4, p.str()
		case "requests":
			n, a.Requests = 5, p.int()
		case "outcomes":
			n = 6
			p.outcomes(&a.Outcomes)
		case "prompt_tokens":
			n = 7
			p.moments(&a.PromptTokens)
		case "completion_tokens":
			n = 8
			p.moments(&a.CompletionTokens)
		case "ttft_ms":
			n = 9
			p.histogram(&a.TTFT)
		case "latency_ms":
			n = 10
			p.histogram(&a.Latency)
		case "tool_loops":
			n, a.ToolLoops = 11, p.int()
		case "arm_fingerprint":
			n, a.ArmFingerprint = 13, p.str()
		case "late_headers":
			n, a.LateHeaders = 14, p.int()
		case "tool_steps":
			n = 12
			p.object(func(key []byte) (n int) {
				switch string(key) {
				case "count":
					n, a.ToolSteps.Count = 0, p.int()
				case "sum":
					n, a.ToolSteps.Sum = 1, p.int()
				default:
					n = -1
				}
				return n
			})
		default:
			n = -1
		}
		return n
	})
}

func (p *parser) outcomes(o *Outcomes) {
	p.object(func(key []byte) (n int) {
		var f *int64
		switch string(key) {
		case "ok":
			n, f = 0, &o.OK
		case "schema_violation":
			n, f = 1, &o.SchemaViolation
		case "invalid_json":
			n, f = 2, &o.InvalidJSON
		case "upstream_4xx":
			n, f = 3, &o.Upstream4xx
		case "upstream_5xx":
			n, f = 4, &o.Upstream5xx
		case "timeout":
			n, f = 5, &o.Timeout
		case "upstream_error":
			n, f = 6, &o.UpstreamError
		case "cancelled":
			n, f = 7, &o.Cancelled
		case "schema_violation_both":
			n, f = 8, &o.SchemaViolationBoth
		case "truncated":
			n, f = 9, &o.Truncated
		default:
			return -1
		}
		*f = p.int()
		return n
	})
}

func (p *parser) moments(m *Moments) {
	p.object(func(key []byte) (n int) {
		switch string(key) {
		case "count":
			n, m.Count = 0, p.int()
		case "sum":
			n, m.Sum = 1, p.float()
		case "sum_sq":
			n, m.SumSq = 2, p.float()
		case "min":
			n, m.Min = 3, p.float()
		case "max":
			n, m.Max = 4, p.float()
		default:
			n = -1
		}
		return n
	})
}

// histogram reads a histogram.Log with its UnmarshalJSON's rules: every
// field present, gamma exactly histogram.Gamma, no more bins than a
// histogram can have, every counted bin in range.
func (p *parser) histogram(h *histogram.Log) {
	var (
		counts []uint64
		w      histogram.Log
	)
	seen := p.object(func(key []byte) (n int) {
		switch string(key) {
		case "gamma":
			n = 0
			if p.float() != histogram.Gamma {
				p.bad = true
			}
		case "zero":
			n, w.Zero = 1, p.uint()
		case "offset":
			n, w.Offset = 2, int(p.int())
		case "counts":
			n = 3
			counts = p.counts(make([]uint64, 0, 160))
		case "overflow":
			n, w.Overflow = 4, p.uint()
		default:
			n = -1
		}
		return n
	})
	if p.bad || seen != 1<<5-1 || len(counts) > histogram.MaxBin-histogram.MinBin+1 {
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
	if !p.open('[', ']') {
		if p.bad {
			return nil
		}
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
		if !p.next(']') {
			if p.bad {
				return nil
			}
			return dst
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

// object reads an object whose keys are known, each at most once. It
// calls field with each key, the cursor at its value; field reads the
// value and returns the key's number (0 to 31, one per key it knows), or
// -1 for a key it does not know. object returns the set of numbers read
// (bit n for number n) and sets bad at anything else: a syntax error, an
// unknown key, a repeated one (encoding/json would take the last), or a
// value field did not read.
func (p *parser) object(field func(key []byte) int) (seen uint32) {
	if !p.open('{', '}') {
		return 0
	}
	for {
		p.space()
		key := p.rawStr()
		p.space()
		if p.bad || p.i >= len(p.b) || p.b[p.i] != ':' {
			p.bad = true
			return 0
		}
		p.i++
		p.space()
		n := field(key)
		if n < 0 || seen&(1<<n) != 0 {
			p.bad = true
		}
		if p.bad {
			return 0
		}
		seen |= 1 << n
		if !p.next('}') {
			return seen
		}
	}
}

// array reads an array, calling elem with the cursor at each element.
func (p *parser) array(elem func()) {
	if !p.open('[', ']') {
		return
	}
	for {
		p.space()
		if elem(); p.bad || !p.next(']') {
			return
		}
	}
}

// open reads the opening byte of an object or an array and reports
// whether a member or an element follows: false after an empty one, and
// false with bad set when the opening byte is not there.
func (p *parser) open(opening, closing byte) bool {
	p.space()
	if p.bad || p.i >= len(p.b) || p.b[p.i] != opening {
		p.bad = true
		return false
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == closing {
		p.i++
		return false
	}
	return true
}

// next reads what follows a member or an element: a comma (true: another
// one follows) or the closing byte (false); anything else sets bad.
func (p *parser) next(closing byte) bool {
	p.space()
	switch {
	case p.i >= len(p.b):
	case p.b[p.i] == ',':
		p.i++
		return true
	case p.b[p.i] == closing:
		p.i++
		return false
	}
	p.bad = true
	return false
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
