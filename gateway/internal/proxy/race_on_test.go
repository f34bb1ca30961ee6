//go:build race

package proxy

// raceEnabled: the race detector runs, and its shadow memory (several
// times the heap) counts in the resident size.
const raceEnabled = true
