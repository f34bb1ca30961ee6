package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestBlockText(t *testing.T) {
	p := newPromptWriter(4)
	for _, n := range []int64{0, 7, 182789, -3, 1 << 40} {
		id := blockID(strconv.FormatInt(n, 10))
		b := p.block(id)
		if len(b) != blockBytes {
			t.Fatalf("block(%s) is %d bytes; want %d", id, len(b), blockBytes)
		}
		prefix := string(id) + " "
		if !bytes.HasPrefix(b, []byte(prefix)) {
			t.Errorf("block(%s) starts %q; want %q", id, b[:20], prefix)
		}
		for i, c := range b[len(prefix):] {
			if c != ' ' && (c < 'a' || c > 'z') {
				t.Fatalf("block(%s) byte %d is %q; want a lowercase letter or a space", id, len(prefix)+i, c)
			}
		}
		again := make([]byte, blockBytes)
		blockText(again, id)
		if !bytes.Equal(b, again) {
			t.Errorf("block(%s) differs between two makings", id)
		}
	}
	if bytes.Equal(p.block("1")[2:], p.block("2")[2:]) {
		t.Error("blocks 1 and 2 have the same words")
	}
}

func TestPromptBody(t *testing.T) {
	p := newPromptWriter(2) // smaller than the ids below: texts are made again
	rows := []traceRow{
		{InputLength: 1, OutputLength: 3, HashIDs: ids(5)},
		{InputLength: 512, OutputLength: 1, HashIDs: ids(5)},
		{InputLength: 700, OutputLength: 40, HashIDs: ids(5, 6)},
		{InputLength: 1500, OutputLength: 2, HashIDs: ids(5, 6, 7)},
		{InputLength: 1500, OutputLength: 2, HashIDs: ids(9, 6, 7)},
	}
	var contents []string
	for _, row := range rows {
		body := p.body(row)
		var v struct {
			Model         string `json:"model"`
			Stream        bool   `json:"stream"`
			MaxTokens     int    `json:"max_tokens"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("body of %+v is not JSON: %v", row, err)
		}
		if v.Model != replayModel || !v.Stream || !v.StreamOptions.IncludeUsage || v.MaxTokens != row.OutputLength || len(v.Messages) != 1 || v.Messages[0].Role != "user" {
			t.Errorf("body of %+v = %s…; want one streamed user message, max_tokens %d", row, body[:min(len(body), 160)], row.OutputLength)
		}
		c := v.Messages[0].Content
		if len(c) != row.InputLength*4 {
			t.Errorf("content of %d tokens is %d bytes; want %d", row.InputLength, len(c), row.InputLength*4)
		}
		// Nothing the JSON encoder escapes: the content is in the body as is.
		if !bytes.Contains(body, []byte(`"content":"`+c+`"`)) {
			t.Errorf("content of %+v was escaped in the body", row)
		}
		contents = append(contents, c)
	}
	// Equal ids, equal text: each prompt extends the one before it, and
	// the last two differ in their first block only.
	for i := 1; i < 4; i++ {
		if contents[i][:len(contents[i-1])] != contents[i-1] {
			t.Errorf("prompt %d does not start with prompt %d", i, i-1)
		}
	}
	if contents[3][:blockBytes] == contents[4][:blockBytes] || contents[3][blockBytes:] != contents[4][blockBytes:] {
		t.Error("prompts [5 6 7] and [9 6 7] should differ in their first block only")
	}
	if p.made < 5 {
		t.Errorf("made %d block texts with a cache of 2; want the evicted ones made again", p.made)
	}
}

func BenchmarkPromptBody(b *testing.B) {
	row := traceRow{InputLength: 12035, OutputLength: 343}
	for i := range 24 {
		row.HashIDs = append(row.HashIDs, blockID(strconv.Itoa(i)))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := newPromptWriter(1) // every block made
		b.SetBytes(int64(row.InputLength * 4))
		p.body(row)
	}
}

// TestPromptBodyUnchanged: the bodies of rows in the format are byte for
// byte what they were before rows off it were taken (SHA-256 of each).
func TestPromptBodyUnchanged(t *testing.T) {
	p := newPromptWriter(8)
	for _, tc := range []struct {
		row  traceRow
		want string
	}{
		{traceRow{InputLength: 1, OutputLength: 3, HashIDs: ids(5)}, "fbe3dfd9dc7bd7b762b6e048acd8b4b95111f671fee56e2b4414132e2c134fdb"},
		{traceRow{InputLength: 700, OutputLength: 40, HashIDs: ids(5, 6)}, "7dc32a2633b8393ed3682235bafce4f2b9be62edff101325bfb55cefa3863899"},
		{traceRow{InputLength: 1536, OutputLength: 2, HashIDs: ids(0, -3, 9223372036854775807)}, "afbb7af1972c02be9915f7425bcb10e2aee541ab3125e3523c23ac57f2d09d3a"},
		{traceRow{InputLength: 12035, OutputLength: 343, HashIDs: ids(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24)}, "a6b88c33576addd518ca84f04e3a7d429f372d28588ea7808d65b08239801225"},
	} {
		if got := fmt.Sprintf("%x", sha256.Sum256(p.body(tc.row))); got != tc.want {
			t.Errorf("SHA-256 of the body of %d tokens over %v = %s; want %s", tc.row.InputLength, tc.row.HashIDs, got, tc.want)
		}
	}
}

// TestPromptContentOffFormat: the content of rows the format does not
// quite describe.
func TestPromptContentOffFormat(t *testing.T) {
	p := newPromptWriter(8)
	content := func(row traceRow) string { return string(p.content(nil, row)) }
	block := func(id blockID) string { return string(p.block(id)) }

	// No hash_ids: input_length × 4 bytes of words, a letter first (never
	// a block's id), the same for the same line, another for another.
	noIDs := traceRow{Line: 7, InputLength: 700, OutputLength: 1}
	c := content(noIDs)
	if len(c) != 2800 || c[0] < 'a' || c[0] > 'z' {
		t.Errorf("content of a row without hash_ids = %d bytes starting %q; want 2800 starting with a letter", len(c), c[:min(len(c), 10)])
	}
	for i, b := range []byte(c) {
		if b != ' ' && (b < 'a' || b > 'z') {
			t.Fatalf("byte %d of the filler is %q; want a lowercase letter or a space", i, b)
		}
	}
	if content(noIDs) != c {
		t.Error("the filler of a row differs between two makings")
	}
	other := noIDs
	other.Line = 8
	if content(other)[:64] == c[:64] {
		t.Error("rows of lines 7 and 8 have the same filler")
	}
	if got := content(traceRow{Line: 9, InputLength: 0}); got != "" {
		t.Errorf("content of a row without hash_ids or input = %q; want empty", got)
	}
	// Appending after what dst holds.
	if got := string(p.content([]byte("xy"), noIDs)); got != "xy"+c {
		t.Error("content does not append the filler to dst")
	}

	// input_length beyond the blocks: the blocks, 2,048 bytes each, no more.
	if got, want := content(traceRow{InputLength: 2000, HashIDs: ids(1, 2)}), block("1")+block("2"); got != want {
		t.Errorf("content of 2000 tokens over 2 blocks = %d bytes; want the 2 blocks, %d", len(got), len(want))
	}
	// input_length short of the blocks: cut to input_length × 4 bytes.
	if got, want := content(traceRow{InputLength: 300, HashIDs: ids(1, 2, 3)}), block("1")[:1200]; got != want {
		t.Errorf("content of 300 tokens over 3 blocks = %d bytes; want block 1's first 1200", len(got))
	}
	if got := content(traceRow{InputLength: 0, HashIDs: ids(1)}); got != "" {
		t.Errorf("content of 0 tokens = %q; want empty", got)
	}
	// Ids beyond int64 begin their block with their decimal text.
	for _, id := range []blockID{"18446744073709551615", "123456789012345678901234567890"} {
		b := block(id)
		if len(b) != blockBytes || !strings.HasPrefix(b, string(id)+" ") {
			t.Errorf("block(%s) = %d bytes starting %q", id, len(b), b[:40])
		}
	}
	if block("123456789012345678901234567890")[31:] == block("123456789012345678901234567891")[31:] {
		t.Error("two ids beyond 64 bits draw the same words")
	}
	// output_length below 1: max_tokens 1.
	if body := string(p.body(traceRow{InputLength: 1, OutputLength: 0, HashIDs: ids(1)})); !strings.Contains(body, `"max_tokens":1,`) {
		t.Errorf("body of output_length 0 = %s; want max_tokens 1", body)
	}
}
