//go:build race

package engine

// raceDetector: the race detector checks every byte a copy touches, so
// reading a MaxPage page takes seconds; the tests that only measure the
// cap run without it (task test runs every package so).
const raceDetector = true
