//go:build race

package publish

// raceEnabled: the race detector runs, and slows every goroutine several
// times over, acknowledgements included.
const raceEnabled = true
