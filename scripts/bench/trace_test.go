package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/graygate/graygate/scripts/internal/repo"
)

func TestReadTrace(t *testing.T) {
	good := `{"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}

{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1], "extra": "ignored"}
{"timestamp": 2000, "input_length": 1025, "output_length": 7, "hash_ids": [1, 2, 3]}
`
	rows, err := readTrace(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	// Arrival order, stable for equal timestamps; line numbers kept.
	var lines []int
	for _, r := range rows {
		lines = append(lines, r.Line)
	}
	if want := []int{3, 1, 4}; !equalInts(lines, want) {
		t.Errorf("readTrace lines in order = %v; want %v", lines, want)
	}
	if r := rows[2]; r.Timestamp != 2000 || r.InputLength != 1025 || r.OutputLength != 7 || !slices.Equal(r.HashIDs, ids(1, 2, 3)) {
		t.Errorf("row of line 4 = %+v", r)
	}
	if got := rows[2].blockTokens(2); got != 1 {
		t.Errorf("last block of 1025 tokens holds %d; want 1", got)
	}
	if got := rows[0].blockTokens(0); got != 512 {
		t.Errorf("last block of 512 tokens holds %d; want 512", got)
	}

	ok := `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}` + "\n"
	for _, tc := range []struct {
		name, line, want string
	}{
		{"not JSON", `{"timestamp": 0,`, "line 2: " + traceRowShape},
		{"no timestamp", `{"input_length": 10, "output_length": 5, "hash_ids": [1]}`, "line 2: no timestamp"},
		{"null timestamp", `{"timestamp": null, "input_length": 10, "output_length": 5, "hash_ids": [1]}`, "line 2: no timestamp"},
		{"no input_length", `{"timestamp": 0, "output_length": 5, "hash_ids": [1]}`, "line 2: no input_length"},
		{"no output_length", `{"timestamp": 0, "input_length": 10, "hash_ids": [1]}`, "line 2: no output_length"},
		{"string timestamp", `{"timestamp": "0", "input_length": 10, "output_length": 5, "hash_ids": [1]}`, `line 2: timestamp "0": want a number`},
		{"string id", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": ["a"]}`, `line 2: hash_ids[0] "a": want an integer`},
		{"fractional id", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1, 2.5]}`, `line 2: hash_ids[1] 2.5: want an integer`},
		{"ids not an array", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": 7}`, `line 2: hash_ids 7: want an array of integers`},
		{"fractional length", `{"timestamp": 0, "input_length": 10.5, "output_length": 5, "hash_ids": [1]}`, "line 2: input_length 10.5: want a whole number of tokens"},
		{"negative length", `{"timestamp": 0, "input_length": -1, "output_length": 5, "hash_ids": [1]}`, "line 2: input_length -1: want 0 or more"},
		{"two values", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]} {}`, "line 2: more than one JSON value"},
		{"array", `[1]`, "line 2: " + traceRowShape},
		{"string", `"row"`, "line 2: " + traceRowShape},
		{"null", `null`, "line 2: " + traceRowShape},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTrace(strings.NewReader(ok + tc.line + "\n" + ok))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("readTrace(%s) error = %v; want one starting %q", tc.line, err, tc.want)
			}
			// Plain messages, no dump of Go types.
			if err != nil && (strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "int64") || strings.Contains(err.Error(), "unmarshal")) {
				t.Errorf("readTrace(%s) error = %v; want a plain message", tc.line, err)
			}
		})
	}
	if _, err := readTrace(strings.NewReader("\n\n")); err == nil {
		t.Error("readTrace of no rows succeeded")
	}
	if _, err := loadTrace(filepath.Join(t.TempDir(), "absent.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("loadTrace(absent) error = %v; want not exist", err)
	}
}

// ids makes block ids of integers.
func ids(ns ...int64) []blockID {
	var out []blockID
	for _, n := range ns {
		out = append(out, blockID(strconv.FormatInt(n, 10)))
	}
	return out
}

// TestReadTraceLenient: rows of other traces in the same format that do
// not follow it to the letter replay rather than refuse the whole trace.
func TestReadTraceLenient(t *testing.T) {
	ok := `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}` + "\n"
	for _, tc := range []struct {
		name, line string
		want       traceRow // Line is not compared
	}{
		{"no hash_ids", `{"timestamp": 5, "input_length": 700, "output_length": 3}`,
			traceRow{Timestamp: 5, InputLength: 700, OutputLength: 3}},
		{"null hash_ids", `{"timestamp": 5, "input_length": 700, "output_length": 3, "hash_ids": null}`,
			traceRow{Timestamp: 5, InputLength: 700, OutputLength: 3}},
		{"empty hash_ids", `{"timestamp": 5, "input_length": 700, "output_length": 3, "hash_ids": []}`,
			traceRow{Timestamp: 5, InputLength: 700, OutputLength: 3}},
		{"no input", `{"timestamp": 5, "input_length": 0, "output_length": 3, "hash_ids": []}`,
			traceRow{Timestamp: 5, InputLength: 0, OutputLength: 3}},
		{"input beyond its blocks", `{"timestamp": 5, "input_length": 1025, "output_length": 3, "hash_ids": [1, 2]}`,
			traceRow{Timestamp: 5, InputLength: 1025, OutputLength: 3, HashIDs: ids(1, 2)}},
		{"input short of its blocks", `{"timestamp": 5, "input_length": 512, "output_length": 3, "hash_ids": [1, 2]}`,
			traceRow{Timestamp: 5, InputLength: 512, OutputLength: 3, HashIDs: ids(1, 2)}},
		{"fractional timestamp", `{"timestamp": 1234.56, "input_length": 10, "output_length": 3, "hash_ids": [1]}`,
			traceRow{Timestamp: 1234.56, InputLength: 10, OutputLength: 3, HashIDs: ids(1)}},
		{"exponent timestamp", `{"timestamp": 1.5E3, "input_length": 10, "output_length": 3, "hash_ids": [1]}`,
			traceRow{Timestamp: 1500, InputLength: 10, OutputLength: 3, HashIDs: ids(1)}},
		{"negative timestamp", `{"timestamp": -20, "input_length": 10, "output_length": 3, "hash_ids": [1]}`,
			traceRow{Timestamp: -20, InputLength: 10, OutputLength: 3, HashIDs: ids(1)}},
		{"whole lengths written as floats", `{"timestamp": 0, "input_length": 6e2, "output_length": 3.0, "hash_ids": [1, 2]}`,
			traceRow{InputLength: 600, OutputLength: 3, HashIDs: ids(1, 2)}},
		{"uint64 and wider ids, negative ids, -0", `{"timestamp": 0, "input_length": 2048, "output_length": 3, "hash_ids": [18446744073709551615, 123456789012345678901234567890, -9223372036854775808, -0]}`,
			traceRow{InputLength: 2048, OutputLength: 3, HashIDs: []blockID{"18446744073709551615", "123456789012345678901234567890", "-9223372036854775808", "0"}}},
		{"output below 1", `{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [1]}`,
			traceRow{InputLength: 10, OutputLength: 0, HashIDs: ids(1)}},
		{"CRLF", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [1]}\r",
			traceRow{InputLength: 10, OutputLength: 3, HashIDs: ids(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := readTrace(strings.NewReader(ok + tc.line + "\n"))
			if err != nil {
				t.Fatalf("readTrace(%s): %v", tc.line, err)
			}
			var got traceRow
			for _, r := range rows {
				if r.Line == 2 {
					got = r
				}
			}
			got.Line = 0
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("readTrace(%s) row = %+v; want %+v", tc.line, got, tc.want)
			}
		})
	}

	// A byte-order mark before the first row is not part of it.
	rows, err := readTrace(strings.NewReader("\xef\xbb\xbf" + ok + ok))
	if err != nil || len(rows) != 2 {
		t.Errorf("readTrace(BOM + 2 rows) = %d rows, %v; want 2", len(rows), err)
	}
	// Arrival is relative to the first row, whatever its sign or fraction.
	rows, err = readTrace(strings.NewReader(strings.Join([]string{
		`{"timestamp": -1000.5, "input_length": 10, "output_length": 3, "hash_ids": [1]}`,
		`{"timestamp": 2e3, "input_length": 10, "output_length": 3, "hash_ids": [1]}`,
		`{"timestamp": -2000.5, "input_length": 10, "output_length": 3, "hash_ids": [1]}`,
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for _, r := range rows {
		got = append(got, arrival(r, rows[0], 2))
	}
	if want := []time.Duration{0, 500 * time.Millisecond, 2000250 * time.Microsecond}; !slices.Equal(got, want) {
		t.Errorf("arrivals at 2× = %v; want %v", got, want)
	}
}

// TestTraceWarnings: the rows taken though off the format are counted in
// one line per kind, not a line each.
func TestTraceWarnings(t *testing.T) {
	trace := strings.Join([]string{
		`{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}`,
		`{"timestamp": 1, "input_length": 10, "output_length": 5}`,
		`{"timestamp": 2, "input_length": 10, "output_length": 5, "hash_ids": null}`,
		`{"timestamp": 3, "input_length": 10, "output_length": 5, "hash_ids": []}`,
		`{"timestamp": 4, "input_length": 2000, "output_length": 5, "hash_ids": [1]}`,
		`{"timestamp": 5, "input_length": 10, "output_length": 5, "hash_ids": [1, 2, 3]}`,
		`{"timestamp": 6, "input_length": 10, "output_length": 0, "hash_ids": [1]}`,
		`{"timestamp": 7, "input_length": 10, "output_length": 5}`,
		`{"timestamp": 8, "input_length": 10, "output_length": 5}`,
	}, "\n")
	rows, err := readTrace(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	w := traceWarnings(rows)
	if len(w) != 3 {
		t.Fatalf("traceWarnings = %q; want 3 lines", w)
	}
	for i, want := range []string{"5 rows without hash_ids (lines 2, 3, 4, …)", "2 rows whose input_length does not fit their hash_ids as blocks of 512 tokens (lines 5, 6)", "1 row with output_length below 1 (line 7)"} {
		if !strings.HasPrefix(w[i], want) {
			t.Errorf("warning %d = %q; want one starting %q", i, w[i], want)
		}
	}
	ok, _ := readTrace(strings.NewReader(`{"timestamp": 0, "input_length": 1025, "output_length": 5, "hash_ids": [1, 2, 3]}`))
	if w := traceWarnings(ok); len(w) != 0 {
		t.Errorf("traceWarnings of a row in the format = %q; want none", w)
	}
}

// TestReadTraceErrorLine: a read error names the file's line it stopped
// at, blank lines counted, and a directory is refused plainly.
func TestReadTraceErrorLine(t *testing.T) {
	rows := `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}` + "\n\n" +
		`{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": [1]}` + "\n"
	_, err := readTrace(io.MultiReader(strings.NewReader(rows), iotest.ErrReader(errors.New("disk on fire"))))
	if err == nil || err.Error() != "line 4: disk on fire" {
		t.Errorf("readTrace(3 lines, then a read error) error = %v; want line 4: disk on fire", err)
	}
	dir := t.TempDir()
	_, err = loadTrace(dir)
	if err == nil || !strings.Contains(err.Error(), dir+" is a directory") {
		t.Errorf("loadTrace(a directory) error = %v; want one saying it is a directory", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReplayWindow(t *testing.T) {
	var rows []traceRow
	for _, ts := range []float64{1000, 1000, 2000, 4000, 7000, 7001, 9000} {
		rows = append(rows, traceRow{Timestamp: ts})
	}
	for _, tc := range []struct {
		speed float64
		d     time.Duration
		want  int
	}{
		{1, 0, 2},                                  // the first instant only
		{1, 3 * time.Second, 4},                    // 1000..4000, the end included
		{3, 2 * time.Second, 5},                    // 6 s of trace: up to 7000
		{2, 3*time.Second + time.Millisecond/2, 6}, // 6.001 s of trace
		{1, time.Hour, 7},
	} {
		if got := len(replayWindow(rows, tc.speed, tc.d)); got != tc.want {
			t.Errorf("replayWindow(speed %v, %s) = %d rows; want %d", tc.speed, tc.d, got, tc.want)
		}
	}
	if got := arrival(rows[4], rows[0], 3); got != 2*time.Second {
		t.Errorf("arrival of 7000 ms after 1000 ms at 3× = %s; want 2s", got)
	}
}

func TestBoundHitRatio(t *testing.T) {
	row := func(input int, blocks ...int64) traceRow {
		return traceRow{InputLength: input, OutputLength: 1, HashIDs: ids(blocks...)}
	}
	for _, tc := range []struct {
		name           string
		rows           []traceRow
		capacityTokens int64
		hit, total     int64
	}{
		{"no reuse", []traceRow{row(1024, 1, 2), row(1024, 3, 4)}, 0, 0, 2048},
		// A block counts the tokens it holds in the request at hand.
		{"shared prefix, partial last block counts what it holds",
			[]traceRow{row(1000, 1, 2), row(1100, 1, 2, 5), row(1000, 1, 2)}, 0, 1024 + 1000, 1000 + 1100 + 1000},
		// The prefix stops at the first miss: block 3 after a gap is no hit.
		{"hits stop at the first miss", []traceRow{row(1536, 1, 2, 3), row(1536, 1, 9, 3)}, 0, 512, 3072},
		// Two blocks of room: row 3 finds 1 evicted by 3 and 4.
		{"least recently used out", []traceRow{row(1024, 1, 2), row(1024, 3, 4), row(1024, 1, 2)}, 1024, 0, 3072},
		{"recent use keeps a block", []traceRow{row(512, 1), row(512, 2), row(512, 1), row(512, 3), row(512, 1)}, 1024, 1024, 2560},
		// A row without blocks hits nothing and keeps nothing, but its
		// tokens are replayed prompt tokens: the denominator has them.
		{"a row without hash_ids counts in the denominator only",
			[]traceRow{row(1024, 1, 2), row(700), row(1024, 1, 2)}, 1024, 1024, 1024 + 700 + 1024},
		// input_length beyond the blocks: the content is the blocks, 512
		// tokens each, and the bound counts those.
		{"input beyond the blocks counts what they hold",
			[]traceRow{row(2000, 1), row(2000, 1)}, 0, 512, 1024},
		// input_length short of the blocks: the blocks past its tokens are
		// not in the content, so neither hit nor kept.
		{"blocks past input_length are not in the prompt",
			[]traceRow{row(600, 1, 2, 3), row(1536, 1, 2, 3)}, 0, 1024, 600 + 1536},
		{"no input", []traceRow{row(0, 1), row(512, 1)}, 0, 0, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := boundHitRatio(tc.rows, tc.capacityTokens)
			if got.HitTokens != tc.hit || got.PromptTokens != tc.total {
				t.Errorf("boundHitRatio = %d/%d tokens; want %d/%d", got.HitTokens, got.PromptTokens, tc.hit, tc.total)
			}
			if want := float64(tc.hit) / float64(tc.total); math.Abs(got.Ratio-want) > 1e-12 {
				t.Errorf("ratio = %v; want %v", got.Ratio, want)
			}
		})
	}
}

// shippedTrace is the Mooncake trace beside the checkout, or skips.
func shippedTrace(t *testing.T) []traceRow {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, defaultTracePath)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("the shipped trace is not here (%v): SPEC §12's figures are not checked", err)
	}
	rows, err := loadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestBoundHitRatioOnShippedTrace checks the figures SPEC §12 gives for
// the Mooncake trace's first 720 s — the default window, 240 s at 3×.
func TestBoundHitRatioOnShippedTrace(t *testing.T) {
	rows := shippedTrace(t)
	if len(rows) != 12031 {
		t.Errorf("the shipped trace has %d rows; its README says 12,031", len(rows))
	}
	window := replayWindow(rows, 3, 240*time.Second)
	if len(window) != 2164 {
		t.Errorf("240 s at 3× replays %d requests; SPEC §12 says 2,164", len(window))
	}
	if w := replayWindow(rows, 1, 720*time.Second); len(w) != len(window) {
		t.Errorf("720 s at 1× replays %d requests; 240 s at 3× %d", len(w), len(window))
	}
	bounded := boundHitRatio(window, 8*1048576)
	unbounded := boundHitRatio(window, 0)
	t.Logf("first 720 s: %d requests, %d prompt tokens, %d distinct blocks; bound %.4f, unbounded %.4f",
		len(window), bounded.PromptTokens, bounded.DistinctBlocks, bounded.Ratio, unbounded.Ratio)
	if math.Abs(bounded.Ratio-0.25) > 0.005 {
		t.Errorf("bound_hit_ratio of the first 720 s = %.4f; SPEC §12 says 0.25", bounded.Ratio)
	}
	if math.Abs(unbounded.Ratio-0.29) > 0.005 {
		t.Errorf("unbounded hit ratio of the first 720 s = %.4f; SPEC §12 says 0.29", unbounded.Ratio)
	}
	// The figures and the request bodies of the first 720 s, as they were
	// before the reader took rows off the format: the shipped trace's
	// replay is unchanged by it.
	if bounded.HitTokens != 7405568 || bounded.PromptTokens != 29518655 || unbounded.HitTokens != 8649243 || bounded.DistinctBlocks != 41786 {
		t.Errorf("bound of the first 720 s = %d/%d (unbounded %d hit), %d blocks; want 7405568/29518655 (8649243), 41786",
			bounded.HitTokens, bounded.PromptTokens, unbounded.HitTokens, bounded.DistinctBlocks)
	}
	if w := traceWarnings(rows); len(w) != 0 {
		t.Errorf("traceWarnings(shipped trace) = %q; want none", w)
	}
	p := newPromptWriter(blockCacheSize)
	h := sha256.New()
	for _, r := range window {
		h.Write(p.body(r))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != "d6c2b5c748841306ce7530ebe9e04dd84cf2e8cd041a7ae33dab6fc925be06fe" {
		t.Errorf("SHA-256 of the first 720 s's request bodies = %s; want d6c2b5c7… as before", got)
	}
}
