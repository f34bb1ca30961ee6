package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

func TestBlockText(t *testing.T) {
	p := newPromptWriter(4)
	for _, id := range []int64{0, 7, 182789, -3, 1 << 40} {
		b := p.block(id)
		if len(b) != blockBytes {
			t.Fatalf("block(%d) is %d bytes; want %d", id, len(b), blockBytes)
		}
		prefix := strconv.FormatInt(id, 10) + " "
		if !bytes.HasPrefix(b, []byte(prefix)) {
			t.Errorf("block(%d) starts %q; want %q", id, b[:20], prefix)
		}
		for i, c := range b[len(prefix):] {
			if c != ' ' && (c < 'a' || c > 'z') {
				t.Fatalf("block(%d) byte %d is %q; want a lowercase letter or a space", id, len(prefix)+i, c)
			}
		}
		again := make([]byte, blockBytes)
		blockText(again, id)
		if !bytes.Equal(b, again) {
			t.Errorf("block(%d) differs between two makings", id)
		}
	}
	if bytes.Equal(p.block(1)[2:], p.block(2)[2:]) {
		t.Error("blocks 1 and 2 have the same words")
	}
}

func TestPromptBody(t *testing.T) {
	p := newPromptWriter(2) // smaller than the ids below: texts are made again
	rows := []traceRow{
		{InputLength: 1, OutputLength: 3, HashIDs: []int64{5}},
		{InputLength: 512, OutputLength: 1, HashIDs: []int64{5}},
		{InputLength: 700, OutputLength: 40, HashIDs: []int64{5, 6}},
		{InputLength: 1500, OutputLength: 2, HashIDs: []int64{5, 6, 7}},
		{InputLength: 1500, OutputLength: 2, HashIDs: []int64{9, 6, 7}},
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
		row.HashIDs = append(row.HashIDs, int64(i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := newPromptWriter(1) // every block made
		b.SetBytes(int64(row.InputLength * 4))
		p.body(row)
	}
}
