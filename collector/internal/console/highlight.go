package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// Caps of a payload's pretty-printed view: a larger payload, or one
// nested deeper, is shown as text.
const (
	maxPrettyBytes = 1 << 20
	maxPrettyLines = 20000
	maxDepth       = 200
)

// node is one JSON value in document order.
type node struct {
	kind   byte // '{', '[', '"', '0' (number), 't' (true/false), 'n' (null)
	key    *string
	text   string // a scalar's JSON text
	kids   []*node
	parsed *node // a string holding a JSON object or array, parsed
	parent *node // the object or array holding this value; nil at a root
	errs   []int // the errors (1-based) that name this value
	// missing names the properties errors say are required here; extra
	// those they say are not allowed here.
	missing, extra []string
}

var errTooDeep = errors.New("nested too deep")

// parseJSON reads one JSON document keeping the order of object members.
func parseJSON(b []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return n, nil
}

func parseValue(dec *json.Decoder, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch v := tok.(type) {
	case json.Delim:
		n := &node{kind: byte(v)}
		for dec.More() {
			var key *string
			if v == '{' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				ks, _ := k.(string)
				key = &ks
			}
			kid, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			kid.key, kid.parent = key, n
			n.kids = append(n.kids, kid)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return &node{kind: '"', text: quote(v)}, nil
	case json.Number:
		return &node{kind: '0', text: v.String()}, nil
	case bool:
		return &node{kind: 't', text: strconv.FormatBool(v)}, nil
	default:
		return &node{kind: 'n', text: "null"}, nil
	}
}

// quote writes s as a JSON string without escaping <, > and & (the page
// escapes them as HTML); the C1 controls and bidirectional formatting
// characters JSON leaves as they are are shown escaped too (text.Escape,
// SPEC §8), so a payload cannot reorder the page.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return text.Escape(strings.TrimSuffix(b.String(), "\n"))
}

// embedContents parses the message contents of a chat or completions
// answer (choices[i].message.content, choices[i].text) that hold a JSON
// object or array — what a content schema judges — and returns them by
// choice index.
func embedContents(root *node) map[int]*node {
	out := map[int]*node{}
	choices := root.member("choices")
	if choices == nil || choices.kind != '[' {
		return out
	}
	for i, ch := range choices.kids {
		s := ch.member("message").member("content")
		if s == nil {
			s = ch.member("text")
		}
		if s == nil || s.kind != '"' {
			continue
		}
		var str string
		if json.Unmarshal([]byte(s.text), &str) != nil {
			continue
		}
		t := strings.TrimSpace(str)
		if !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, "[") {
			continue
		}
		if p, err := parseJSON([]byte(t)); err == nil {
			s.parsed = p
			out[i] = p
		}
	}
	return out
}

func (n *node) member(key string) *node {
	if n == nil || n.kind != '{' {
		return nil
	}
	for _, k := range n.kids {
		if *k.key == key {
			return k
		}
	}
	return nil
}

// child follows one path segment: a member of an object, an index of an
// array.
func (n *node) child(seg string) *node {
	switch {
	case n == nil:
		return nil
	case n.kind == '{':
		return n.member(seg)
	case n.kind == '[':
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(n.kids) {
			return nil
		}
		return n.kids[i]
	}
	return nil
}

// contentPrefix is the prefix the gateway puts on an error's description
// when an answer has several contents: which one it judged.
var contentPrefix = regexp.MustCompile(`^choices\[(\d+)\]\.(?:message\.content|text): `)

// requiredProp and extraProp are gojsonschema's descriptions of a
// missing property (required) and of one the schema does not allow
// (additionalProperties); its error's field is then the object that
// holds it, though a validator may name the property itself.
var (
	requiredProp = regexp.MustCompile(`^(.+) is required$`)
	extraProp    = regexp.MustCompile(`^Additional property (.+) is not allowed$`)
)

// fieldPath splits a validation error's field into path segments:
// gojsonschema's "(root)", "(root).action", "action.args", "items.0",
// and the gateway's "choices[0].message.content" (brackets become
// segments). The root is no segment at all.
func fieldPath(field string) []string {
	f := strings.TrimPrefix(strings.TrimSpace(field), "(root)")
	f = strings.TrimPrefix(f, ".")
	f = strings.NewReplacer("[", ".", "]", "").Replace(f)
	if f == "" {
		return nil
	}
	return strings.Split(f, ".")
}

// walk follows path from n as far as it goes; it returns the last node
// reached and how many segments matched.
func walk(n *node, path []string) (*node, int) {
	for i, seg := range path {
		next := n.child(seg)
		if next == nil {
			return n, i
		}
		n = next
	}
	return n, len(path)
}

// annotate marks, for each validation error, the value its field names:
// in the parsed content it judged when the answer is a chat or completions
// answer with JSON content (a content schema), else in the body. A path
// that does not exist (a property that is missing) marks the deepest
// value that does. It reports, per error, whether its field was found as
// named.
func annotate(root *node, errs []events.ValidationError) []bool {
	contents := embedContents(root)
	exact := make([]bool, len(errs))
	for i, e := range errs {
		path := fieldPath(e.Field)
		desc := e.Description
		choice := 0
		if m := contentPrefix.FindStringSubmatch(desc); m != nil {
			choice, _ = strconv.Atoi(m[1])
			desc = desc[len(m[0]):]
		}
		// Candidates: the judged content, then the body; the one where
		// the path goes furthest wins, the content on a tie.
		best, depth := walk(root, path)
		if c := contents[choice]; c != nil && !(len(path) > 0 && path[0] == "choices") {
			if n, d := walk(c, path); d >= depth {
				best, depth = n, d
			}
		}
		exact[i] = depth == len(path)
		// A missing or an extra property marks the object that holds it.
		if m := requiredProp.FindStringSubmatch(desc); m != nil {
			if holder := propertyHolder(best, path, depth, m[1], false); holder != nil {
				best, exact[i] = holder, true
				best.missing = append(best.missing, m[1])
			}
		} else if m := extraProp.FindStringSubmatch(desc); m != nil {
			if holder := propertyHolder(best, path, depth, m[1], true); holder != nil {
				best, exact[i] = holder, true
				best.extra = append(best.extra, m[1])
			}
		}
		best.errs = append(best.errs, i+1)
	}
	return exact
}

// propertyHolder returns the object that holds property prop as an
// error names it, given the node its path reached (reached, after depth
// of the path's segments): the reached object itself when the path went
// all the way (the field names the holder), or its parent object when the
// field names the property — the last segment is prop, and the path
// stopped right before it (a missing property) or went all the way to it
// (an extra one, present). nil when neither fits.
func propertyHolder(reached *node, path []string, depth int, prop string, present bool) *node {
	switch {
	case depth == len(path) && reached.kind == '{' && (reached.member(prop) != nil) == present:
		return reached
	case len(path) == 0 || path[len(path)-1] != prop:
		return nil
	case !present && depth == len(path)-1 && reached.kind == '{':
		return reached
	case present && depth == len(path):
		return reached.parent
	}
	return nil
}

// Line is one line of a pretty-printed payload.
type Line struct {
	Indent string
	Key    string // the member's quoted name, "" in arrays and at the root
	Value  string // the scalar, or the opening or closing bracket
	Class  string // the value's class: str, num, bool, null, punct
	Comma  bool
	Note   string // "JSON string, shown parsed", "missing: action"
	Errs   []int  // errors naming this value (highlighted)
}

// prettyLines renders n as lines, an embedded JSON content as nested
// lines under its key.
func prettyLines(n *node) []Line {
	var out []Line
	var emit func(n *node, depth int, comma bool)
	emit = func(n *node, depth int, comma bool) {
		if len(out) >= maxPrettyLines {
			return
		}
		ind := strings.Repeat("  ", depth)
		l := Line{Indent: ind, Errs: n.errs}
		if n.key != nil {
			l.Key = quote(*n.key)
		}
		var notes []string
		if len(n.missing) > 0 {
			notes = append(notes, "missing: "+strings.Join(n.missing, ", "))
		}
		if len(n.extra) > 0 {
			notes = append(notes, "not allowed: "+strings.Join(n.extra, ", "))
		}
		l.Note = strings.Join(notes, "; ")
		if n.parsed != nil {
			l.Value, l.Class = "", "punct"
			if l.Note == "" {
				l.Note = "a JSON string, shown parsed"
			}
			out = append(out, l)
			emit(n.parsed, depth+1, comma)
			return
		}
		switch n.kind {
		case '{', '[':
			closer := "}"
			if n.kind == '[' {
				closer = "]"
			}
			if len(n.kids) == 0 {
				l.Value, l.Class, l.Comma = string(n.kind)+closer, "punct", comma
				out = append(out, l)
				return
			}
			l.Value, l.Class = string(n.kind), "punct"
			out = append(out, l)
			for i, k := range n.kids {
				emit(k, depth+1, i < len(n.kids)-1)
			}
			out = append(out, Line{Indent: ind, Value: closer, Class: "punct", Comma: comma})
		default:
			l.Value, l.Comma = n.text, comma
			l.Class = map[byte]string{'"': "str", '0': "num", 't': "bool", 'n': "null"}[n.kind]
			out = append(out, l)
		}
	}
	emit(n, 0, false)
	return out
}

// Payload is a sample's payload as the sample page shows it.
type Payload struct {
	// Lines is the pretty-printed JSON with the failing fields marked;
	// nil when the payload is not shown as JSON.
	Lines []Line
	// Text is the payload as text when it is not JSON (or too big).
	Text string
	// Found reports per error whether its field was found as named.
	Found []bool
	// Note says why the payload is shown as text.
	Note string
	// Cut is set when Lines stopped at maxPrettyLines.
	Cut bool
	// Anchor prefixes the ids of the error list the marks link to
	// ("err" when empty): a page with two payloads has two lists.
	Anchor string
}

// preparePayload pretty-prints a sample's payload and marks the fields its
// errors name.
func preparePayload(s string, errs []events.ValidationError) Payload {
	if len(s) > maxPrettyBytes {
		return Payload{Text: s[:maxPrettyBytes], Note: "larger than 1 MiB: shown as text, cut"}
	}
	root, err := parseJSON([]byte(s))
	if err != nil {
		return Payload{Text: s, Note: "not JSON (" + err.Error() + "): shown as text"}
	}
	found := annotate(root, errs)
	lines := prettyLines(root)
	return Payload{Lines: lines, Found: found, Cut: len(lines) >= maxPrettyLines}
}
