package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Content modes: what the assistant message content looks like.
const (
	contentJSON        = "json"         // a valid agent action (schemas/contracts/agent-action.schema.json)
	contentSchemaBreak = "schema-break" // valid JSON that violates the agent-action schema
	contentText        = "text"         // plain prose, not JSON
	contentInvalidJSON = "invalid-json" // the HTTP body (or each stream chunk) is truncated JSON
	contentEcho        = "echo"         // the last user message, verbatim
)

// Bounds that keep a typo in a test or the demo from exhausting the machine.
const (
	maxCompletionTokens = 1 << 20
	maxAnswerBytes      = 64 << 20
	maxToolCalls        = 128
)

// headerPrefix starts every per-request override header: x-mock-<name>.
const headerPrefix = "x-mock-"

// Settings is the behaviour of the mock for one request. Every field is an
// option settable by a flag (process default), by PUT /_mock/config (live
// default) and by an x-mock-<name> request header, in increasing precedence.
type Settings struct {
	// Latency is the total time before the headers of a non-streaming answer
	// (or of an error answer) are written. Streams ignore it.
	Latency time.Duration
	// TTFT is the delay between a stream's role chunk and its first content
	// (or tool call) chunk.
	TTFT time.Duration
	// InterToken is the delay between consecutive content chunks of a stream.
	InterToken time.Duration
	// CompletionTokens is the answer's length in tokens: one content chunk per
	// token in a stream, that many words of variable text otherwise, and the
	// usage's completion_tokens. Zero gives empty content in every mode.
	CompletionTokens int
	// AnswerBytes, when larger than the generated content, pads the content to
	// exactly this many bytes (0: no padding). Echo content is never padded.
	AnswerBytes int
	// Usage includes the usage object in answers (and, for streams whose
	// request asked for stream_options.include_usage, the final usage chunk).
	Usage bool
	// BytesPerToken is the tokenizer ratio used for usage.prompt_tokens.
	BytesPerToken float64
	// Content is one of the content modes above.
	Content string
	// ToolCalls, when positive, answers with that many tool calls and null content.
	ToolCalls int
	// ToolName is the function name of every tool call.
	ToolName string
	// ToolArgs is the arguments string of every tool call.
	ToolArgs string
	// FinishReason is the finish_reason of a content answer (chat and
	// completions): "stop", or "length" as when max_tokens cut it.
	FinishReason string
	// Status is the HTTP status of the answer; 300 and above answer an OpenAI
	// error envelope instead of a completion.
	Status int
	// RetryAfter, when set, is sent as the Retry-After header of error answers.
	RetryAfter string
	// Hang accepts the request and never answers until the client goes away.
	Hang bool
	// DropAfter, when not negative, cuts the connection abruptly: a stream after
	// that many data events, a non-stream after half of its body.
	DropAfter int
	// Model is the model name in answers; empty echoes the request's model.
	Model string
	// Spread, when positive, multiplies each request's latency, TTFT and
	// completion tokens by its own draw of exp(Spread·Z), Z standard
	// normal: lognormal noise around the configured values (their medians),
	// so two mocks with the same settings answer like two samples of one
	// model. 0 (the default) answers exactly as configured.
	Spread float64
	// InflateOn, when set, is "MARKER:FACTOR": a request whose system (or
	// developer) text contains MARKER gets FACTOR times the completion
	// tokens — a prompt change that makes answers longer, which the mock
	// cannot otherwise see (the demo's prompt-only gray release).
	InflateOn string
}

// defaultSettings are the process defaults before flags are applied.
func defaultSettings() Settings {
	return Settings{
		CompletionTokens: 16,
		Usage:            true,
		BytesPerToken:    4,
		Content:          contentJSON,
		ToolName:         "search",
		ToolArgs:         `{"query":"x"}`,
		FinishReason:     "stop",
		Status:           http.StatusOK,
		DropAfter:        -1,
	}
}

// option describes one behaviour knob: how it is parsed from text (flags,
// headers, config JSON) and how it is shown.
type option struct {
	name    string
	usage   string
	kind    string // the value's kind as --help shows it
	isBool  bool
	set     func(s *Settings, v string) error
	get     func(s *Settings) any
	restore func(dst, src *Settings) // copies this option's value from src
}

// options lists every behaviour knob in the order --help shows them.
var options = []option{
	durationOption("latency", "total delay before a non-streaming answer's headers",
		func(s *Settings) *time.Duration { return &s.Latency }),
	durationOption("ttft", "delay before a stream's first content chunk",
		func(s *Settings) *time.Duration { return &s.TTFT }),
	durationOption("inter-token", "delay between a stream's content chunks",
		func(s *Settings) *time.Duration { return &s.InterToken }),
	intOption("completion-tokens", "answer length in tokens (one stream chunk per token)", 0, maxCompletionTokens,
		func(s *Settings) *int { return &s.CompletionTokens }),
	intOption("answer-bytes", "pad the content to this many bytes (0: no padding)", 0, maxAnswerBytes,
		func(s *Settings) *int { return &s.AnswerBytes }),
	boolOption("usage", "include usage (streams: a final usage chunk when the request asks for it)",
		func(s *Settings) *bool { return &s.Usage }),
	floatOption("bytes-per-token", "UTF-8 bytes per prompt token for usage.prompt_tokens",
		func(f float64) bool { return f > 0 && f <= 1e6 }, "a number in (0, 1e6]",
		func(s *Settings) *float64 { return &s.BytesPerToken }),
	modeOption("content", "content mode: json | schema-break | text | invalid-json | echo",
		[]string{contentJSON, contentSchemaBreak, contentText, contentInvalidJSON, contentEcho}, "json, schema-break, text, invalid-json or echo",
		func(s *Settings) *string { return &s.Content }),
	intOption("tool-calls", "answer with this many tool calls (finish_reason tool_calls)", 0, maxToolCalls,
		func(s *Settings) *int { return &s.ToolCalls }),
	stringOption("tool-name", "function name of the tool calls",
		func(s *Settings) *string { return &s.ToolName }),
	stringOption("tool-args", "arguments string of the tool calls",
		func(s *Settings) *string { return &s.ToolArgs }),
	modeOption("finish-reason", "finish_reason of a content answer: stop | length (as when max_tokens cut it)",
		[]string{"stop", "length"}, "stop or length",
		func(s *Settings) *string { return &s.FinishReason }),
	intOption("status", "HTTP status; 300 and above answer an OpenAI error envelope", 200, 599,
		func(s *Settings) *int { return &s.Status }),
	stringOption("retry-after", "Retry-After header value sent with error answers",
		func(s *Settings) *string { return &s.RetryAfter }),
	boolOption("hang", "accept the request and never answer",
		func(s *Settings) *bool { return &s.Hang }),
	intOption("drop-after", "cut the connection after N stream chunks, or after half a non-stream body (-1: never)", -1, maxCompletionTokens,
		func(s *Settings) *int { return &s.DropAfter }),
	stringOption("model", "model name in answers (empty: the request's model)",
		func(s *Settings) *string { return &s.Model }),
	floatOption("spread", "σ of per-request lognormal noise on latency, ttft and completion-tokens (0: none)",
		func(f float64) bool { return f >= 0 && f <= 3 }, "a number in [0, 3]",
		func(s *Settings) *float64 { return &s.Spread }),
	fieldOption("inflate-on", "MARKER:FACTOR — multiply completion tokens by FACTOR when the system prompt contains MARKER (empty: off)",
		"marker:factor", func(v string) (string, error) {
			if v == "" {
				return "", nil
			}
			_, _, err := parseInflate(v)
			return v, err
		},
		func(s *Settings) *string { return &s.InflateOn }),
}

// parseInflate reads an inflate-on value: a non-empty marker, a colon and
// a factor in (0, 100].
func parseInflate(v string) (marker string, factor float64, err error) {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("want MARKER:FACTOR, got %q", v)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v[i+1:]), 64)
	if err != nil || !(f > 0) || f > 100 {
		return "", 0, fmt.Errorf("want MARKER:FACTOR with a factor in (0, 100], got %q", v)
	}
	return v[:i], f, nil
}

// applyInflate multiplies the completion tokens when the request's system
// text holds the inflate-on marker.
func (s *Settings) applyInflate(system string) {
	if s.InflateOn == "" || s.CompletionTokens == 0 {
		return
	}
	marker, f, err := parseInflate(s.InflateOn)
	if err != nil || !strings.Contains(system, marker) {
		return
	}
	s.CompletionTokens = max(1, min(maxCompletionTokens, int(math.Round(float64(s.CompletionTokens)*f))))
}

// optionsByName indexes options by their lowercase name.
var optionsByName = func() map[string]*option {
	m := make(map[string]*option, len(options))
	for i := range options {
		m[options[i].name] = &options[i]
	}
	return m
}()

// fieldOption is the option over one field of Settings: parse reads its
// text (a flag, a header, a config value) or says what it wants.
func fieldOption[T any](name, usage, kind string, parse func(string) (T, error), field func(*Settings) *T) option {
	return option{
		name:  name,
		usage: usage,
		kind:  kind,
		set: func(s *Settings, v string) error {
			x, err := parse(v)
			if err != nil {
				return err
			}
			*field(s) = x
			return nil
		},
		get:     func(s *Settings) any { return *field(s) },
		restore: func(dst, src *Settings) { *field(dst) = *field(src) },
	}
}

func durationOption(name, usage string, field func(*Settings) *time.Duration) option {
	o := fieldOption(name, usage, "duration", func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return 0, fmt.Errorf("want a non-negative Go duration like 250ms, got %q", v)
		}
		return d, nil
	}, field)
	o.get = func(s *Settings) any { return field(s).String() }
	return o
}

func intOption(name, usage string, lo, hi int, field func(*Settings) *int) option {
	return fieldOption(name, usage, "int", func(v string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("want an integer in [%d, %d], got %q", lo, hi, v)
		}
		return n, nil
	}, field)
}

// floatOption reads a number that valid accepts; want describes them.
func floatOption(name, usage string, valid func(float64) bool, want string, field func(*Settings) *float64) option {
	return fieldOption(name, usage, "float", func(v string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !valid(f) {
			return 0, fmt.Errorf("want %s, got %q", want, v)
		}
		return f, nil
	}, field)
}

func boolOption(name, usage string, field func(*Settings) *bool) option {
	o := fieldOption(name, usage, "", func(v string) (bool, error) {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return false, fmt.Errorf("want true or false, got %q", v)
		}
		return b, nil
	}, field)
	o.isBool = true
	return o
}

func stringOption(name, usage string, field func(*Settings) *string) option {
	return fieldOption(name, usage, "string", func(v string) (string, error) { return v, nil }, field)
}

// modeOption reads one of modes; want lists them.
func modeOption(name, usage string, modes []string, want string, field func(*Settings) *string) option {
	return fieldOption(name, usage, "mode", func(v string) (string, error) {
		v = strings.TrimSpace(v)
		if !slices.Contains(modes, v) {
			return "", fmt.Errorf("want %s, got %q", want, v)
		}
		return v, nil
	}, field)
}

// MarshalJSON shows the settings as the object GET /_mock/config answers:
// one key per option name, durations as Go duration strings.
func (s Settings) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(options))
	for i := range options {
		m[options[i].name] = options[i].get(&s)
	}
	return json.Marshal(m)
}

// applyJSON applies a PUT /_mock/config object to s. Keys are option names;
// values are JSON strings, numbers or booleans read as the flag would read
// them; null restores the process default from base. Every problem is
// reported; on error s may be partly changed, so callers apply to a copy.
func (s *Settings) applyJSON(body []byte, base *Settings) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return fmt.Errorf("config body must be a JSON object: %w", err)
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		opt, ok := optionsByName[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown option", name))
			continue
		}
		raw := obj[name]
		if string(raw) == "null" {
			opt.restore(s, base)
			continue
		}
		text := string(raw)
		if len(raw) > 0 && raw[0] == '"' {
			if err := json.Unmarshal(raw, &text); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
		} else if len(raw) > 0 && (raw[0] == '{' || raw[0] == '[') {
			errs = append(errs, fmt.Errorf("%s: want a string, number or boolean", name))
			continue
		}
		if err := opt.set(s, text); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// applyHeaders applies x-mock-<name> request headers to s. It returns an
// error naming the first unknown or unreadable header.
func (s *Settings) applyHeaders(h http.Header) error {
	for key, vals := range h {
		if len(key) <= len(headerPrefix) || !strings.EqualFold(key[:len(headerPrefix)], headerPrefix) || len(vals) == 0 {
			continue
		}
		name := strings.ToLower(key[len(headerPrefix):])
		opt, ok := optionsByName[name]
		if !ok {
			return fmt.Errorf("header %s%s: unknown mock option", headerPrefix, name)
		}
		if err := opt.set(s, vals[len(vals)-1]); err != nil {
			return fmt.Errorf("header %s%s: %w", headerPrefix, name, err)
		}
	}
	return nil
}

// flagValue adapts one option of a Settings to flag.Value.
type flagValue struct {
	opt *option
	s   *Settings
}

func (f flagValue) String() string {
	if f.opt == nil || f.s == nil {
		return ""
	}
	return fmt.Sprint(f.opt.get(f.s))
}

func (f flagValue) Set(v string) error { return f.opt.set(f.s, v) }

// flagUsage is the option's --help text, naming its kind the way the flag
// package shows it.
func (o *option) flagUsage() string {
	if o.kind == "" {
		return o.usage
	}
	return o.usage + " (`" + o.kind + "`)"
}

// IsBoolFlag lets boolean options be given as a bare --name.
func (f flagValue) IsBoolFlag() bool { return f.opt != nil && f.opt.isBool }

// applySpread draws this request's lognormal factor for latency, TTFT and
// completion tokens (one draw each, independent), when Spread is positive.
func (s *Settings) applySpread() {
	if s.Spread <= 0 {
		return
	}
	factor := func() float64 { return math.Exp(s.Spread * rand.NormFloat64()) }
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * factor()) }
	s.Latency = scale(s.Latency)
	s.TTFT = scale(s.TTFT)
	if s.CompletionTokens > 0 {
		s.CompletionTokens = max(1, min(maxCompletionTokens, int(math.Round(float64(s.CompletionTokens)*factor()))))
	}
}
