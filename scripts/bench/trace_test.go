package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if r := rows[2]; r.Timestamp != 2000 || r.InputLength != 1025 || r.OutputLength != 7 || len(r.HashIDs) != 3 {
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
		{"not JSON", `{"timestamp": 0,`, "line 2: not a trace row"},
		{"no timestamp", `{"input_length": 10, "output_length": 5, "hash_ids": [1]}`, "line 2: no timestamp"},
		{"no input_length", `{"timestamp": 0, "output_length": 5, "hash_ids": [1]}`, "line 2: no input_length"},
		{"no output_length", `{"timestamp": 0, "input_length": 10, "hash_ids": [1]}`, "line 2: no output_length"},
		{"no hash_ids", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": []}`, "line 2: no hash_ids"},
		{"string id", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": ["a"]}`, "line 2: not a trace row"},
		{"fractional length", `{"timestamp": 0, "input_length": 10.5, "output_length": 5, "hash_ids": [1]}`, "line 2: not a trace row"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 10, "output_length": 5, "hash_ids": [1]}`, "line 2: timestamp -1 is negative"},
		{"zero output", `{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [1]}`, "line 2: output_length 0"},
		{"input beyond its blocks", `{"timestamp": 0, "input_length": 1025, "output_length": 5, "hash_ids": [1, 2]}`, "line 2: input_length 1025 does not fit 2 blocks"},
		{"input short of its blocks", `{"timestamp": 0, "input_length": 512, "output_length": 5, "hash_ids": [1, 2]}`, "line 2: input_length 512 does not fit 2 blocks"},
		{"two values", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]} {}`, "line 2: more than one JSON value"},
		{"array", `[1]`, "line 2: not a trace row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTrace(strings.NewReader(ok + tc.line + "\n" + ok))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("readTrace(%s) error = %v; want one starting %q", tc.line, err, tc.want)
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
	for _, ts := range []int64{1000, 1000, 2000, 4000, 7000, 7001, 9000} {
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
	row := func(input int, ids ...int64) traceRow {
		return traceRow{InputLength: input, OutputLength: 1, HashIDs: ids}
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
}
