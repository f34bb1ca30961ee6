package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// The request trace of the replica-balancing benchmark (SPEC §12 rev. 4,
// shared/traces/README.md): one JSON object a line, a request each, with
// its arrival time, its input and output lengths in tokens, and its prompt
// as the ids of 512-token blocks (equal ids are equal blocks, so two
// requests whose lists start alike share that prefix). Nothing here knows
// the Mooncake trace's particulars: any file in this format replays.

// traceBlockTokens is the size of one hash_ids block, in tokens, as the
// format defines it.
const traceBlockTokens = 512

// traceRow is one request of a trace.
type traceRow struct {
	// Line is the row's 1-based line number in its file, for messages.
	Line int
	// Timestamp is the arrival time in milliseconds from the trace's start.
	Timestamp int64
	// InputLength and OutputLength are the prompt's and the answer's
	// length in tokens.
	InputLength, OutputLength int
	// HashIDs are the prompt's blocks of traceBlockTokens tokens; the last
	// one holds what remains of InputLength.
	HashIDs []int64
}

// blockTokens returns the tokens block i of the row holds: a whole block,
// except the last, which holds what remains of the input (1 to 512).
func (r traceRow) blockTokens(i int) int {
	if i < len(r.HashIDs)-1 {
		return traceBlockTokens
	}
	return r.InputLength - traceBlockTokens*(len(r.HashIDs)-1)
}

// readTrace reads a trace: every non-blank line must be an object with
// the four fields, input_length must fit its blocks (more than the blocks
// before the last, at most all of them) and output_length be at least 1.
// The first bad line's error names its line number. The rows come back in
// arrival order (stable for equal timestamps), whatever the file's order.
func readTrace(r io.Reader) ([]traceRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var rows []traceRow
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		row, err := parseTraceLine(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		row.Line = line
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("after line %d: %w", len(rows), err)
	}
	if len(rows) == 0 {
		return nil, errors.New("no requests")
	}
	slices.SortStableFunc(rows, func(a, b traceRow) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	return rows, nil
}

// parseTraceLine decodes one row and checks it.
func parseTraceLine(b []byte) (traceRow, error) {
	var v struct {
		Timestamp    *int64   `json:"timestamp"`
		InputLength  *int     `json:"input_length"`
		OutputLength *int     `json:"output_length"`
		HashIDs      *[]int64 `json:"hash_ids"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil {
		return traceRow{}, fmt.Errorf("not a trace row: %w", err)
	}
	if dec.More() {
		return traceRow{}, errors.New("more than one JSON value")
	}
	switch {
	case v.Timestamp == nil:
		return traceRow{}, errors.New("no timestamp")
	case v.InputLength == nil:
		return traceRow{}, errors.New("no input_length")
	case v.OutputLength == nil:
		return traceRow{}, errors.New("no output_length")
	case v.HashIDs == nil || len(*v.HashIDs) == 0:
		return traceRow{}, errors.New("no hash_ids")
	case *v.Timestamp < 0:
		return traceRow{}, fmt.Errorf("timestamp %d is negative", *v.Timestamp)
	case *v.OutputLength < 1:
		return traceRow{}, fmt.Errorf("output_length %d: want at least 1 (it is the request's max_tokens)", *v.OutputLength)
	}
	row := traceRow{Timestamp: *v.Timestamp, InputLength: *v.InputLength, OutputLength: *v.OutputLength, HashIDs: *v.HashIDs}
	n := len(row.HashIDs)
	if lo, hi := traceBlockTokens*(n-1)+1, traceBlockTokens*n; row.InputLength < lo || row.InputLength > hi {
		return traceRow{}, fmt.Errorf("input_length %d does not fit %d blocks of %d tokens (want %d to %d)",
			row.InputLength, n, traceBlockTokens, lo, hi)
	}
	return row, nil
}

// loadTrace reads the trace file at path.
func loadTrace(path string) ([]traceRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := readTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// arrival is when a row is sent, from the start of the replay: its time
// after the trace's first row, divided by speed.
func arrival(row, first traceRow, speed float64) time.Duration {
	return time.Duration(float64(row.Timestamp-first.Timestamp) * float64(time.Millisecond) / speed)
}

// replayWindow returns the rows (in arrival order) that arrive within d
// of the replay's start at speed, the end included: at 3× for 240 s, the
// Mooncake trace's rows stamped 0 to 720,000 ms (2,164 requests).
func replayWindow(rows []traceRow, speed float64, d time.Duration) []traceRow {
	if len(rows) == 0 {
		return nil
	}
	n := 0
	for n < len(rows) && arrival(rows[n], rows[0], speed) <= d {
		n++
	}
	return rows[:n]
}

// boundResult is what one shared LRU cache of the whole pool's capacity
// would have hit of a replay's prompts.
type boundResult struct {
	// Ratio is HitTokens ÷ PromptTokens.
	Ratio                   float64
	HitTokens, PromptTokens int64
	// DistinctBlocks is the number of different block ids the rows name.
	DistinctBlocks int
}

// boundHitRatio is the share of the rows' prompt tokens that one cache of
// capacityTokens (the pool's: replicas × --kv-cache-tokens), evicting the
// least recently used block, would have hit, replaying the rows in order
// — what perfect placement could reach. The cache holds whole blocks: its
// capacity is capacityTokens ÷ 512 blocks (capacityTokens ≤ 0: unbounded).
// A request hits its blocks up to its first miss (an engine's prefix
// cache reuses a prefix, never a block after a gap), then all its blocks
// become the most recently used, in order. A block counts the tokens it
// holds: 512, and for a request's last block what remains of
// input_length, so the ratio is of the prompt tokens the engine sees.
//
// Counting the last block as 512 tokens, or its hits as none, moves the
// Mooncake trace's figure by less than 0.005; with this definition its
// first 720 s (2,164 requests) give 0.251 at 8 × 1,048,576 tokens and
// 0.293 unbounded, SPEC §12's 0.25 and 0.29.
func boundHitRatio(rows []traceRow, capacityTokens int64) boundResult {
	capBlocks := 0
	if capacityTokens > 0 {
		capBlocks = int(max(1, capacityTokens/traceBlockTokens))
	}
	cache := newLRU[int64, struct{}](capBlocks)
	distinct := map[int64]struct{}{}
	var r boundResult
	for _, row := range rows {
		hitting := true
		for i, id := range row.HashIDs {
			distinct[id] = struct{}{}
			tokens := int64(row.blockTokens(i))
			r.PromptTokens += tokens
			if hitting && cache.contains(id) {
				r.HitTokens += tokens
			} else {
				hitting = false
			}
		}
		for _, id := range row.HashIDs {
			cache.put(id, struct{}{})
		}
	}
	if r.PromptTokens > 0 {
		r.Ratio = float64(r.HitTokens) / float64(r.PromptTokens)
	}
	r.DistinctBlocks = len(distinct)
	return r
}
