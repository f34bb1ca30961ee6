package engine

import "errors"

// Errors a scrape returns, wrapped with the URL and what was found.
var (
	// ErrStatus: the replica answered with a status other than 200.
	ErrStatus = errors.New("unexpected status")
	// ErrTooLarge: the page is longer than MaxPage bytes.
	ErrTooLarge = errors.New("page too large")
	// ErrParse: the page is not in the Prometheus text format.
	ErrParse = errors.New("not a Prometheus text page")
	// ErrNoGauges: the page has none of the engine gauges (an engine
	// without them, such as SGLang without --enable-metrics behind a
	// proxy that answers 200, or not an engine at all). Zeros would make
	// the replica look idle, so the page is not used.
	ErrNoGauges = errors.New("no engine gauge")
	// ErrValue: an engine gauge is negative, NaN or infinite.
	ErrValue = errors.New("bad gauge value")
)
