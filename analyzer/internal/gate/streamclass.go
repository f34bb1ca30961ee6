package gate

// StreamClass is a gate result's stream class: a gate over every attempt,
// or one judged on the non-streamed or on the streamed attempts alone. The
// order is the order results are listed in. Each output spells the classes
// its own way (StreamClassNames).
type StreamClass int

const (
	AllAttempts StreamClass = iota
	NonStreamed
	Streamed
)

// StreamClassOf returns the class of a result's Stream (nil: every attempt).
func StreamClassOf(stream *bool) StreamClass {
	switch {
	case stream == nil:
		return AllAttempts
	case *stream:
		return Streamed
	default:
		return NonStreamed
	}
}

// Stream returns the Stream field of a result of class c.
func (c StreamClass) Stream() *bool {
	if c == AllAttempts {
		return nil
	}
	s := c == Streamed
	return &s
}

// StreamClassNames spells each class for one output (a metric label, a
// table cell, a message).
type StreamClassNames [3]string

// Of returns the spelling of the class of stream.
func (n StreamClassNames) Of(stream *bool) string { return n[StreamClassOf(stream)] }
