package scan

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of arrays and objects a body may have.
// Python's json module gives up near 1000; chat bodies nest a handful.
const MaxDepth = 256

// key identifies the top-level keys the scan records.
type key uint8

const (
	keyOther key = iota
	keyParam     // one of the governed parameters; the Param is returned beside it
	keyModel
	keyStream
	keyMaxTokens
	keyMaxCompletionTokens
	keyUser
	keyStreamOptions
	keyMessages
	keyTools
	keyPrompt // completions' prompt, embeddings' input: text measured
	keyCacheSalt

	// Keys of a Responses API body (ScanResponses only).
	keyInput // responses' input: a string or an array of items
	keyInstructions
	keyMaxOutputTokens
	keyStore
	keyPreviousResponseID
	keyConversation

	numKeys
)

// Scan reads body once and fills r. It returns a *SyntaxError for invalid
// JSON, ErrNotObject when the top level is not an object, ErrTooDeep,
// ErrInvalidUTF8, or a *DuplicateKeyError for a repeated routing key.
// Scan does not retain body.
// It reads body as a chat completion's (ScanFor names another API).
func Scan(body []byte, r *Request) error { return ScanFor(Chat, body, r) }

// ScanResponses is Scan for a Responses API body (POST /v1/responses): it
// reads "input" as items and text parts, "instructions", the routing key
// "max_output_tokens" and the keys that say whether the request is
// stateful ("store", "previous_response_id", "conversation"), and leaves
// chat's "messages" and completions' "prompt" alone.
func ScanResponses(body []byte, r *Request) error { return ScanFor(Responses, body, r) }

// API is the endpoint a body is posted to: it decides which key carries
// the text the estimate measures (SPEC §3, §5.3), as the engine reads
// only its own API's keys.
type API uint8

const (
	Chat        API = iota // "messages"
	Completions            // "prompt"
	Embeddings             // "input"
	Responses              // "input" items and "instructions" (ScanResponses)
)

// ScanFor is Scan for a body posted to api: another API's text key
// ("prompt" in a chat body, "messages" or "input" in a completions body)
// is some other key, measured by nothing.
func ScanFor(api API, body []byte, r *Request) error {
	*r = Request{}
	if !utf8.Valid(body) {
		return ErrInvalidUTF8
	}
	responses := api == Responses
	s := scanner{b: body, api: api}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		if s.i < len(s.b) && s.validValue() {
			return ErrNotObject
		}
		if s.i >= len(s.b) {
			return &SyntaxError{Offset: s.i, Msg: "empty body"}
		}
		return ErrNotObject
	}
	s.i++
	s.ws()
	if s.peek() == '}' {
		r.Close = s.i
		s.i++
		return s.end()
	}
	for {
		name, err := s.memberKey()
		if err != nil {
			return err
		}
		k, p := s.classifyKey(name.Start, name.End)
		m := Member{Key: Span{name.Start, s.i}, Index: r.Members}
		vStart := s.i
		switch k {
		case keyMessages:
			m.Kind, err = s.messages(r)
		case keyTools:
			m.Kind, err = s.tools(r)
		case keyStreamOptions:
			m.Kind, err = s.streamOptions(r)
		case keyPrompt:
			m.Kind, err = s.promptText(r)
		case keyInput:
			m.Kind, err = s.responsesInput(r)
		case keyInstructions:
			m.Kind, err = s.instructions(r)
		default:
			m.Kind, err = s.value(0, nil)
		}
		if err != nil {
			return err
		}
		m.Value = Span{vStart, s.i}
		if err := r.record(k, p, m, s.b); err != nil {
			return err
		}
		r.Members++
		more, err := s.next('}', "expected ',' or '}' after an object member")
		if err != nil {
			return err
		}
		if more {
			continue
		}
		r.Close = s.i - 1 // the '}' next stepped past
		r.TextBytes = r.msgBytes + r.toolsBytes + r.promptBytes + r.instrBytes
		if responses {
			r.MessageCount = r.inputItems
			if r.Instructions.Kind == KindString {
				r.MessageCount++ // the instructions are a system message
			}
		}
		return s.end()
	}
}

func (r *Request) record(k key, p Param, m Member, b []byte) error {
	if k == keyParam {
		r.Params[p] = m
		return nil
	}
	sl := slots[k]
	if sl.offset == 0 {
		return nil
	}
	slot := (*Member)(unsafe.Add(unsafe.Pointer(r), sl.offset))
	again := slot.Present() && sl.routing != ""
	*slot = m
	if again {
		return &DuplicateKeyError{Key: sl.routing}
	}
	return nil
}

// slots is, for each key, the Request field that holds its member: read
// once from the fields' key tags, each name classified as a body's key
// is (classifyKey, the one table of names), for a body of every API.
var slots = keySlots()

// keySlot is where a key's member is kept: the offset of its field in a
// Request (0 for none: Params comes first), and for a routing key its
// name, which may not repeat.
type keySlot struct {
	offset  uintptr
	routing string
}

func keySlots() (slots [numKeys]keySlot) {
	t := reflect.TypeFor[Request]()
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("key")
		if !ok {
			continue
		}
		names, opt, _ := strings.Cut(tag, ",")
		for _, name := range strings.Fields(names) {
			for _, api := range []API{Chat, Completions, Embeddings, Responses} {
				s := scanner{b: []byte(`"` + name + `"`), api: api}
				if k, _ := s.classifyKey(0, len(s.b)); k != keyOther && k != keyParam {
					slots[k].offset = f.Offset
					if opt == "routing" {
						slots[k].routing = name
					}
				}
			}
		}
	}
	return slots
}

// promptText reads completions' "prompt" or embeddings' "input": a
// string, an array of strings, a token-id array or an array of them.
// Strings count their UTF-8 bytes toward TextBytes; token ids are counted
// apart, in TokenIDs (SPEC §3: a token-id array counts its length).
func (s *scanner) promptText(r *Request) (Kind, error) {
	r.promptBytes, r.TokenIDs = 0, 0
	var elem func(depth int) error
	elem = func(depth int) error {
		switch s.peek() {
		case '"':
			return s.skipString(&r.promptBytes)
		case '[':
			if depth > 2 {
				_, err := s.value(depth, nil)
				return err
			}
			return s.array(depth+1, func() error { return elem(depth + 1) })
		}
		k, err := s.value(depth, nil)
		if k == KindNumber {
			r.TokenIDs++
		}
		return err
	}
	if s.peek() == '"' || s.peek() == '[' {
		k := KindString
		if s.peek() == '[' {
			k = KindArray
		}
		return k, elem(1)
	}
	return s.value(1, nil)
}

// scanner is a cursor over the body. Its methods advance s.i past what they
// read and report syntax errors with the offset where reading stopped.
type scanner struct {
	b []byte
	i int
	// api is the endpoint the body is posted to (ScanFor).
	api API
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) fail(msg string) error {
	if s.i >= len(s.b) {
		return &SyntaxError{Offset: s.i, Msg: "unexpected end of body"}
	}
	return &SyntaxError{Offset: s.i, Msg: msg}
}

func (s *scanner) ws() { s.i = SkipSpace(s.b, s.i) }

// SkipSpace returns the index of the first byte at or after b[i] that is
// not JSON whitespace (space, tab, newline, carriage return).
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.fail("unexpected data after the top-level object")
	}
	return nil
}

// validValue reports whether the rest of the body is one valid JSON value,
// to tell "not an object" from "not JSON".
func (s *scanner) validValue() bool {
	if _, err := s.value(0, nil); err != nil {
		return false
	}
	return s.end() == nil
}

// value skips one JSON value at s.i and returns its kind. When textBytes is
// not nil and the value is a string, the string's decoded length is added.
func (s *scanner) value(depth int, textBytes *int64) (Kind, error) {
	switch c := s.peek(); c {
	case '"':
		return KindString, s.skipString(textBytes)
	case '{':
		return KindObject, s.container(depth+1, '}')
	case '[':
		return KindArray, s.container(depth+1, ']')
	case 't':
		return KindTrue, s.literal("true")
	case 'f':
		return KindFalse, s.literal("false")
	case 'n':
		return KindNull, s.literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return KindNumber, s.number()
		}
		return KindAbsent, s.fail("expected a JSON value")
	}
}

// container skips an object or array whose opening bracket is at s.i.
func (s *scanner) container(depth int, closer byte) error {
	if empty, err := s.open(depth, closer); empty || err != nil {
		return err
	}
	for {
		if closer == '}' {
			if _, err := s.memberKey(); err != nil {
				return err
			}
		}
		if _, err := s.value(depth, nil); err != nil {
			return err
		}
		if more, err := s.next(closer, "expected ',' or a closing bracket"); !more {
			return err
		}
	}
}

// open steps past the bracket at s.i of a container nested depth deep,
// and reports whether closer follows at once (an empty container, which it
// steps past too).
func (s *scanner) open(depth int, closer byte) (empty bool, err error) {
	if depth > MaxDepth {
		return false, ErrTooDeep
	}
	s.i++
	s.ws()
	if s.peek() == closer {
		s.i++
		return true, nil
	}
	return false, nil
}

// memberKey reads an object member's key, the ':' after it and the white
// space before the value, and returns the key's span (quotes included).
func (s *scanner) memberKey() (Span, error) {
	if s.peek() != '"' {
		return Span{}, s.fail("expected a string key")
	}
	start := s.i
	if err := s.skipString(nil); err != nil {
		return Span{}, err
	}
	key := Span{start, s.i}
	s.ws()
	if s.peek() != ':' {
		return key, s.fail("expected ':' after a key")
	}
	s.i++
	s.ws()
	return key, nil
}

// next reads what follows a member or an element: a ',' and the white
// space after it (more is true), or closer, which it steps past. Anything
// else fails with msg.
func (s *scanner) next(closer byte, msg string) (more bool, err error) {
	s.ws()
	switch s.peek() {
	case ',':
		s.i++
		s.ws()
		return true, nil
	case closer:
		s.i++
		return false, nil
	}
	return false, s.fail(msg)
}

func (s *scanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.fail("invalid literal")
	}
	s.i += len(word)
	return nil
}

// number skips a JSON number (NumberEnd's grammar).
func (s *scanner) number() error {
	b := s.b
	i, _, ok := NumberEnd(b, s.i)
	if !ok {
		s.i = i
		return s.fail("invalid number")
	}
	s.i = i
	// A number must be followed by a delimiter, so that "01" or "1_0"
	// is refused here rather than later.
	if i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
		default:
			return s.fail("invalid number")
		}
	}
	return nil
}

// digits returns the end of the run of decimal digits at b[i:], and
// whether the run is not empty.
// NumberEnd returns the end of the JSON number that starts at b[i] (RFC
// 8259 grammar: no leading zeros, no leading '+', no bare '.', no
// NaN/Infinity) and whether it is an integer literal (no fraction, no
// exponent). ok is false when b[i:] does not start with a number; end is
// then where it stopped being one.
func NumberEnd(b []byte, i int) (end int, isInteger, ok bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i, _ = digits(b, i)
	default:
		return i, false, false
	}
	isInteger, ok = true, true
	if i < len(b) && b[i] == '.' {
		i, ok = digits(b, i+1)
		isInteger = false
	}
	if ok && i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		i, ok = digits(b, i)
		isInteger = false
	}
	return i, isInteger, ok
}

func digits(b []byte, i int) (end int, ok bool) {
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i, i > start
}

// skipString skips the string literal at s.i. When textBytes is not nil,
// the decoded UTF-8 length of the string is added to it.
func (s *scanner) skipString(textBytes *int64) error {
	s.i++
	decoded := 0
	for {
		q := bytes.IndexByte(s.b[s.i:], '"')
		if q < 0 {
			s.i = len(s.b)
			return s.fail("unterminated string")
		}
		seg := s.b[s.i : s.i+q]
		bs := bytes.IndexByte(seg, '\\')
		if bs < 0 {
			if err := s.checkControl(seg); err != nil {
				return err
			}
			decoded += q
			s.i += q + 1
			break
		}
		// An escape comes before the next quote: decode it and go on.
		if err := s.checkControl(seg[:bs]); err != nil {
			return err
		}
		decoded += bs
		s.i += bs
		n, err := s.escape()
		if err != nil {
			return err
		}
		decoded += n
	}
	if textBytes != nil {
		*textBytes += int64(decoded)
	}
	return nil
}

// checkControl refuses raw control characters inside a string, as strict
// JSON decoders (the engine's json.loads among them) do.
func (s *scanner) checkControl(seg []byte) error {
	if j := controlAt(seg); j >= 0 {
		s.i += j
		return s.fail("control character in string")
	}
	return nil
}

// controlAt returns the index of the first byte below 0x20 in b, or -1.
// It tests eight bytes at a time: (w - 0x20…20) & ^w & 0x80…80 is non-zero
// exactly when a byte of w is below 0x20 (a byte ≥ 0x80 has its top bit
// cleared by ^w, and a borrow only starts at a byte below 0x20); only the
// word that holds one is searched byte by byte.
func controlAt(b []byte) int {
	const highs, below = 0x8080808080808080, 0x20 * 0x0101010101010101
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if (w-below)&^w&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return i
		}
	}
	return -1
}

// escape reads the backslash escape at s.i and returns the number of UTF-8
// bytes it decodes to.
func (s *scanner) escape() (int, error) {
	b := s.b
	if s.i+1 >= len(b) {
		s.i = len(b)
		return 0, s.fail("unterminated string")
	}
	switch b[s.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i += 2
		return 1, nil
	case 'u':
		r, ok := hex4(b, s.i+2)
		if !ok {
			return 0, s.fail("invalid \\u escape")
		}
		s.i += 6
		if r >= 0xD800 && r < 0xDC00 {
			// A high surrogate pairs with a following low surrogate into
			// one 4-byte character.
			if s.i+1 < len(b) && b[s.i] == '\\' && b[s.i+1] == 'u' {
				if lo, ok := hex4(b, s.i+2); ok && lo >= 0xDC00 && lo < 0xE000 {
					s.i += 6
					return 4, nil
				}
			}
			return 3, nil
		}
		if n := utf8.RuneLen(r); n > 0 {
			return n, nil
		}
		return 3, nil // a lone low surrogate, encoded as Python would
	default:
		return 0, s.fail("invalid escape")
	}
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
