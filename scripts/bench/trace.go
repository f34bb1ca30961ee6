package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
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

// blockID is one hash_ids entry: the JSON integer as the trace writes it
// (any sign and size — signed and unsigned 64-bit hashes and wider ones
// alike), "-0" written "0". Its text is what a block's content begins
// with, so ids within int64 give the text strconv.FormatInt gives.
type blockID string

// traceRow is one request of a trace.
type traceRow struct {
	// Line is the row's 1-based line number in its file, for messages.
	Line int
	// Timestamp is the arrival time in milliseconds, possibly fractional;
	// only differences from the trace's first row matter.
	Timestamp float64
	// InputLength and OutputLength are the prompt's and the answer's
	// length in tokens, as the trace gives them (an OutputLength below 1
	// is sent as max_tokens 1).
	InputLength, OutputLength int
	// HashIDs are the prompt's blocks of traceBlockTokens tokens; none
	// when the row has no (or null, or empty) hash_ids.
	HashIDs []blockID
}

// contentBlocks is how many of the row's blocks its content holds: the
// content is its blocks' texts cut to input_length × 4 bytes, so blocks
// past input_length's tokens are not in it.
func (r traceRow) contentBlocks() int {
	return min(len(r.HashIDs), (max(r.InputLength, 0)+traceBlockTokens-1)/traceBlockTokens)
}

// blockTokens returns the tokens block i of the row holds in its content:
// input_length's tokens after the blocks before it, at most 512 (a row
// whose input_length exceeds its blocks gets only what they hold).
func (r traceRow) blockTokens(i int) int {
	return min(traceBlockTokens, max(0, r.InputLength-traceBlockTokens*i))
}

// promptTokens is the row's content in tokens (at 4 bytes a token):
// input_length, or what its blocks hold when that is less.
func (r traceRow) promptTokens() int {
	if len(r.HashIDs) == 0 {
		return max(r.InputLength, 0)
	}
	return min(max(r.InputLength, 0), traceBlockTokens*len(r.HashIDs))
}

// fits reports whether input_length fits the row's blocks as the format
// means them: more tokens than the blocks before the last, at most all.
func (r traceRow) fits() bool {
	n := len(r.HashIDs)
	return n > 0 && r.InputLength > traceBlockTokens*(n-1) && r.InputLength <= traceBlockTokens*n
}

// utf8BOM is stripped from the start of a trace.
var utf8BOM = []byte("\xef\xbb\xbf")

// traceRowShape is what every line must be.
const traceRowShape = "want a JSON object with timestamp, input_length, output_length, hash_ids"

// readTrace reads a trace: every non-blank line must be a JSON object with
// a numeric timestamp (ms, fractional or in exponent form, any sign),
// whole input_length (0 or more) and output_length, and hash_ids, an array
// of integers. Rows it replays though they do not follow the format to the
// letter — no hash_ids, an input_length that does not fit its blocks, an
// output_length below 1 — traceWarnings counts. The first bad line's error
// names its line number. The rows come back in arrival order (stable for
// equal timestamps), whatever the file's order.
func readTrace(r io.Reader) ([]traceRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var rows []traceRow
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if line == 1 {
			b = bytes.TrimPrefix(b, utf8BOM)
		}
		b = bytes.TrimSpace(b)
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
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d MiB", 64)
		}
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if len(rows) == 0 {
		return nil, errors.New("no requests (no non-blank lines)")
	}
	slices.SortStableFunc(rows, func(a, b traceRow) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	return rows, nil
}

// parseTraceLine decodes one row and checks it.
func parseTraceLine(b []byte) (traceRow, error) {
	var v struct {
		Timestamp    json.RawMessage `json:"timestamp"`
		InputLength  json.RawMessage `json:"input_length"`
		OutputLength json.RawMessage `json:"output_length"`
		HashIDs      json.RawMessage `json:"hash_ids"`
	}
	if b[0] != '{' {
		return traceRow{}, errors.New(traceRowShape)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil {
		return traceRow{}, errors.New(traceRowShape)
	}
	if dec.More() {
		return traceRow{}, errors.New("more than one JSON value; " + traceRowShape)
	}
	var row traceRow
	var err error
	if row.Timestamp, err = traceNumber("timestamp", v.Timestamp); err != nil {
		return traceRow{}, err
	}
	if row.InputLength, err = traceCount("input_length", v.InputLength); err != nil {
		return traceRow{}, err
	}
	if row.InputLength < 0 {
		return traceRow{}, fmt.Errorf("input_length %d: want 0 or more", row.InputLength)
	}
	if row.OutputLength, err = traceCount("output_length", v.OutputLength); err != nil {
		return traceRow{}, err
	}
	if row.HashIDs, err = traceBlockIDs(v.HashIDs); err != nil {
		return traceRow{}, err
	}
	return row, nil
}

// isNull reports whether a field is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// traceNumber reads a required JSON number.
func traceNumber(name string, raw json.RawMessage) (float64, error) {
	if isNull(raw) {
		return 0, fmt.Errorf("no %s; %s", name, traceRowShape)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || raw[0] == '"' || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s %s: want a number", name, clip(raw))
	}
	return f, nil
}

// traceCount reads a required whole number of tokens (600, 600.0 or 6e2).
func traceCount(name string, raw json.RawMessage) (int, error) {
	f, err := traceNumber(name, raw)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<40 {
		return 0, fmt.Errorf("%s %s: want a whole number of tokens", name, clip(raw))
	}
	return int(f), nil
}

// traceBlockIDs reads hash_ids: absent, null or [] give none.
func traceBlockIDs(raw json.RawMessage) ([]blockID, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, fmt.Errorf("hash_ids %s: want an array of integers", clip(raw))
	}
	if len(items) == 0 {
		return nil, nil
	}
	ids := make([]blockID, len(items))
	for i, it := range items {
		if !isJSONInteger(it) {
			return nil, fmt.Errorf("hash_ids[%d] %s: want an integer", i, clip(it))
		}
		if string(it) == "-0" {
			it = it[1:]
		}
		ids[i] = blockID(it)
	}
	return ids, nil
}

// isJSONInteger reports whether b is a JSON number without fraction or
// exponent: an optional minus, then 0 or digits not starting with 0.
func isJSONInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// clip is a JSON value for a message, cut to 40 bytes.
func clip(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

// traceWarnings describes, a line per kind, the rows readTrace took that
// do not follow the format to the letter, with how many and the first
// lines; none when every row does.
func traceWarnings(rows []traceRow) []string {
	var noIDs, unfit, noOutput []int
	for _, r := range rows {
		switch {
		case len(r.HashIDs) == 0:
			noIDs = append(noIDs, r.Line)
		case !r.fits():
			unfit = append(unfit, r.Line)
		}
		if r.OutputLength < 1 {
			noOutput = append(noOutput, r.Line)
		}
	}
	var w []string
	if len(noIDs) > 0 {
		w = append(w, fmt.Sprintf("%s without hash_ids (%s): their content is input_length × 4 bytes of filler words, no blocks the bound can hit (their tokens count in its denominator)",
			rowCount(len(noIDs)), someLines(noIDs)))
	}
	if len(unfit) > 0 {
		w = append(w, fmt.Sprintf("%s whose input_length does not fit their hash_ids as blocks of %d tokens (%s): their content is their blocks' texts cut to input_length × 4 bytes, at most %d bytes a block, and the bound counts the tokens the blocks hold in it",
			rowCount(len(unfit)), traceBlockTokens, someLines(unfit), blockBytes))
	}
	if len(noOutput) > 0 {
		w = append(w, fmt.Sprintf("%s with output_length below 1 (%s): sent with max_tokens 1",
			rowCount(len(noOutput)), someLines(noOutput)))
	}
	return w
}

func rowCount(n int) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}

// someLines names the first lines of a list, in file order.
func someLines(lines []int) string {
	lines = slices.Clone(lines)
	slices.Sort(lines)
	const shown = 3
	var parts []string
	for _, l := range lines[:min(len(lines), shown)] {
		parts = append(parts, strconv.Itoa(l))
	}
	s := "line " + strings.Join(parts, ", ")
	if len(lines) > 1 {
		s = "lines " + strings.Join(parts, ", ")
	}
	if len(lines) > shown {
		s += ", …"
	}
	return s
}

// loadTrace reads the trace file at path.
func loadTrace(path string) ([]traceRow, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory; want a trace file, JSON lines of {timestamp, input_length, output_length, hash_ids}", path)
	}
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
	return time.Duration((row.Timestamp - first.Timestamp) * float64(time.Millisecond) / speed)
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
// holds in the request's content: 512, and for a request's last block what
// remains of input_length, so the ratio is of the prompt tokens the engine
// sees. A row's blocks are the ones its content holds (none past
// input_length's tokens, and a row whose input_length exceeds its blocks
// counts only what they hold); a row without hash_ids has no block to hit
// or keep, and its tokens count in the denominator all the same.
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
	cache := newLRU[blockID, struct{}](capBlocks)
	distinct := map[blockID]struct{}{}
	var r boundResult
	for _, row := range rows {
		r.PromptTokens += int64(row.promptTokens())
		ids := row.HashIDs[:row.contentBlocks()]
		hitting := true
		for i, id := range ids {
			distinct[id] = struct{}{}
			if hitting && cache.contains(id) {
				r.HitTokens += int64(row.blockTokens(i))
			} else {
				hitting = false
			}
		}
		for _, id := range ids {
			cache.put(id, struct{}{})
		}
	}
	if r.PromptTokens > 0 {
		r.Ratio = float64(r.HitTokens) / float64(r.PromptTokens)
	}
	r.DistinctBlocks = len(distinct)
	return r
}
