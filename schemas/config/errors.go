package config

import (
	"sort"
	"strings"
)

// FieldError is one problem in a configuration file. Path is the key path of
// the offending value (`routing.signals.context[2].max_tokens`, list indexes
// 0-based); it is empty only for problems of the file as a whole, such as a
// YAML syntax error. Line is the 1-based line of the value in the file, 0 when
// unknown (a problem with a value the file does not contain).
type FieldError struct {
	Path    string
	Line    int
	Message string
}

// Error returns "path: message".
func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Errors is every problem found while loading one configuration file, in file
// order. Parse and Load return it as their error so that an operator fixes the
// whole file in one pass instead of one message at a time.
type Errors []*FieldError

// Error returns one "path: message" line per problem.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Warning is a value that loads but probably does not mean what the operator
// intended (SPEC §5.2): an unquoted bound that YAML typing changed, a rounded
// bound, a gap or partial overlap between context bands, a rollout without a
// gray upstream. `gateway validate` prints warnings without failing.
type Warning struct {
	Path, Message string
}

// String returns "path: message".
func (w Warning) String() string {
	if w.Path == "" {
		return w.Message
	}
	return w.Path + ": " + w.Message
}

// issue is an error or a warning before it is sorted into file order.
type issue struct {
	path      string
	msg       string
	line, col int
}

// sortIssues orders issues by their position in the file; issues at the same
// position keep the order in which they were found.
func sortIssues(is []issue) {
	sort.SliceStable(is, func(i, j int) bool {
		if is[i].line != is[j].line {
			return is[i].line < is[j].line
		}
		return is[i].col < is[j].col
	})
}
