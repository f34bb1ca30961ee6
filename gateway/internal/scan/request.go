// Package scan reads an OpenAI chat-completions request body in one pass.
//
// The scan is the only place the gateway parses a client body. It validates
// the JSON syntax, records where the top-level keys the gateway cares about
// live (as byte spans into the body, never copies), and measures the
// conversation for token estimation and tool-loop detection. Everything
// later — the sampling contract, context bands, routing and gray dispatch —
// reads the Request it fills instead of parsing the body again, and every
// change to the forwarded body is an Edit against those spans.
package scan

// Span is the half-open byte range [Start, End) of something in the body.
type Span struct{ Start, End int }

// Len returns the span's length in bytes.
func (s Span) Len() int { return s.End - s.Start }

// Kind is the JSON kind of a recorded value.
type Kind uint8

// Kinds of JSON values. KindAbsent means the key did not occur.
const (
	KindAbsent Kind = iota
	KindNull
	KindFalse
	KindTrue
	KindNumber
	KindString
	KindArray
	KindObject
)

var kindNames = [...]string{"absent", "null", "false", "true", "number", "string", "array", "object"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Param identifies one governed sampling parameter (SPEC §4).
type Param uint8

// The governed parameters, in a fixed order used to index Request.Params.
const (
	Temperature Param = iota
	TopP
	TopK
	MinP
	RepetitionPenalty
	FrequencyPenalty
	PresencePenalty
	N
	NumParams
)

var paramNames = [NumParams]string{
	"temperature", "top_p", "top_k", "min_p",
	"repetition_penalty", "frequency_penalty", "presence_penalty", "n",
}

// String returns the parameter's JSON key.
func (p Param) String() string { return paramNames[p] }

// IsInt reports whether the engine reads the parameter as an integer.
func (p Param) IsInt() bool { return p == TopK || p == N }

// ParamByName returns the parameter with the given JSON key.
func ParamByName(name string) (Param, bool) {
	for i, n := range paramNames {
		if n == name {
			return Param(i), true
		}
	}
	return 0, false
}

// Member is a top-level key of the request object and its value.
type Member struct {
	Kind  Kind
	Key   Span // the key as written, quotes included
	Value Span // the raw JSON value as written (quotes included for strings)
	Index int  // 0-based position among the top-level members, for body order
}

// Present reports whether the key occurred (a JSON null counts as present).
func (m Member) Present() bool { return m.Kind != KindAbsent }

// Request is what one scan learns about a chat-completions body. The zero
// value is ready for Scan, which resets it; a Request holds no pointers into
// the body, only spans, so it can be reused across requests.
//
// The fields with a key tag hold the top-level member of that name (the
// names a body spells it with, space-separated; routing: a repeat is a
// DuplicateKeyError): the scan finds them through the tags (slots).
type Request struct {
	// Params holds each governed key; when a key repeats, the last one wins
	// (as the engine's json.loads does).
	Params [NumParams]Member

	// Routing keys: a repeated one is an error.
	Model               Member `key:"model,routing"`
	Stream              Member `key:"stream,routing"`
	MaxTokens           Member `key:"max_tokens,routing"`
	MaxCompletionTokens Member `key:"max_completion_tokens,routing"`

	// Other keys the gateway reads; when repeated, the last one wins.
	User          Member `key:"user"`
	StreamOptions Member `key:"stream_options"`
	Messages      Member `key:"messages"`
	Tools         Member `key:"tools"`
	// CacheSalt is vLLM's cache_salt: requests with different salts share
	// no prefix cache (SPEC §6.7 seeds the prefix chain with it).
	CacheSalt Member `key:"cache_salt"`

	// IncludeUsage is true when stream_options.include_usage is JSON true;
	// IncludeUsageAt spans the value of its last include_usage key (empty
	// when it has none), for an edit in place.
	IncludeUsage   bool
	IncludeUsageAt Span

	// Close is the offset of the top-level object's closing brace, and
	// Members the number of top-level members (to know whether an inserted
	// key needs a leading comma).
	Close   int
	Members int

	// Conversation measurements (SPEC §5.3, §6.5).
	MessageCount int   // elements of the messages array
	TextBytes    int64 // UTF-8 bytes of string content, text parts, tool call arguments and tool definitions
	// TokenIDs is the number of token ids in a pre-tokenized prompt
	// (completions' "prompt", embeddings' "input"): tokens already, so
	// the estimate adds them as they are, whatever the bytes per token.
	TokenIDs  int64
	ToolSteps int // assistant messages carrying a non-empty tool_calls array
	// LastToolCalls is the tool_calls array of the last assistant message
	// that has one (empty span when none), for repeated-call detection.
	LastToolCalls Span

	// System is the first message whose role is "system" or "developer"
	// (Kind absent when none): Value spans the whole message object, and
	// SystemContent its "content" value (absent when it has none).
	// MessagesOpen is the offset just after the messages array's '['
	// (0 when messages is not an array). A per-arm prompt is edited
	// through them (SPEC §6.6).
	System        Member
	SystemContent Member
	MessagesOpen  int

	// Prompt is completions' "prompt", embeddings' "input" or responses'
	// "input" (rev. 2).
	Prompt Member `key:"prompt input"`

	// DefaultOutputReserve is the output reserve of a body that gives no
	// token limit: the scan leaves it 0 and the caller sets the endpoint's
	// default (SPEC §3: completions' max_tokens defaults to 16).
	DefaultOutputReserve int64

	// Responses API keys (ScanResponses). MaxOutputTokens is a routing
	// key; Instructions is where an arm's prompt goes (SPEC §6.6); Store,
	// PreviousResponseID and Conversation say whether the request holds
	// or names state at the upstream (SPEC §3). For a responses body,
	// MessageCount counts the input items (a string input is one) plus
	// the instructions, and ToolSteps the runs of consecutive
	// function_call items (one assistant turn may call several tools);
	// LastToolCalls spans the first function_call item of the last run.
	MaxOutputTokens    Member `key:"max_output_tokens,routing"`
	Instructions       Member `key:"instructions"`
	Store              Member `key:"store"`
	PreviousResponseID Member `key:"previous_response_id"`
	Conversation       Member `key:"conversation"`

	msgBytes, toolsBytes, promptBytes, instrBytes int64 // the parts of TextBytes, so a repeated key replaces its own part
	inputItems                                    int
}

// Stateless reports whether a Responses API request neither asks the
// upstream to store the response ("store": false) nor names state an
// upstream holds (previous_response_id, conversation; null counts as
// absent). Only such a request may go to a gray with its own upstream.
func (r *Request) Stateless() bool {
	named := func(m Member) bool { return m.Present() && m.Kind != KindNull }
	return r.Store.Kind == KindFalse && !named(r.PreviousResponseID) && !named(r.Conversation)
}
