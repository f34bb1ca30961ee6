package main

import (
	"math/rand/v2"
	"strconv"
)

// A trace row becomes one chat request (SPEC §12 rev. 4): one user message
// whose content is, for each of its hash_ids h, blockBytes bytes — the
// decimal h, a space, then lowercase ASCII words from a PRNG seeded by h —
// the whole cut to input_length × 4 bytes. Equal ids give equal blocks, so
// two prompts share exactly the prefix their ids share, and nothing in the
// text needs a JSON escape, so the body is written around it as is.

const (
	// blockBytes is one trace block's text: 512 tokens at 4 bytes a token.
	blockBytes = traceBlockTokens * bytesPerToken
	// bytesPerToken is the engine mock's ⌈bytes/4⌉ (SPEC §6.7).
	bytesPerToken = 4
	// blockCacheSize bounds the texts kept: 8,192 blocks, 16 MiB. The
	// Mooncake trace names 182,790 distinct blocks over its hour (374 MB
	// of text), 41,786 in its first 720 s; the ones that recur are a
	// conversation's recent turns, which the cache keeps, and a block
	// made again costs about 10 µs.
	blockCacheSize = 8192
	// replayModel is the model the replayed requests ask for.
	replayModel = "bench"
)

// blockSeed is the PCG stream the block texts are drawn from.
const blockSeed = 0x6772617967617465 // "graygate"

// blockText writes block id's text into b, which must be blockBytes long.
func blockText(b []byte, id int64) {
	n := copy(b, strconv.FormatInt(id, 10))
	b[n] = ' '
	n++
	rng := rand.New(rand.NewPCG(uint64(id), blockSeed))
	for n < len(b) {
		w := 2 + rng.IntN(8) // a word of 2 to 9 letters, then a space
		for i := 0; i < w && n < len(b); i++ {
			b[n] = byte('a' + rng.IntN(26))
			n++
		}
		if n < len(b) {
			b[n] = ' '
			n++
		}
	}
}

// promptWriter makes the request bodies of trace rows, keeping the texts
// of the most recently used blocks. It is not safe for concurrent use:
// the replay's one dispatching goroutine owns it.
type promptWriter struct {
	blocks *lru[int64, []byte]
	// made counts the block texts generated (not found in the cache).
	made int
}

func newPromptWriter(cacheBlocks int) *promptWriter {
	return &promptWriter{blocks: newLRU[int64, []byte](max(1, cacheBlocks))}
}

func (p *promptWriter) block(id int64) []byte {
	if b, ok := p.blocks.get(id); ok {
		return b
	}
	b := make([]byte, blockBytes)
	blockText(b, id)
	p.blocks.put(id, b)
	p.made++
	return b
}

// content appends the row's prompt text to dst: its blocks' texts in
// order, cut to input_length × 4 bytes.
func (p *promptWriter) content(dst []byte, row traceRow) []byte {
	want := row.InputLength * bytesPerToken
	for _, id := range row.HashIDs {
		if want <= 0 {
			break
		}
		b := p.block(id)
		n := min(want, len(b))
		dst = append(dst, b[:n]...)
		want -= n
	}
	return dst
}

// body is the row's streamed chat request: its prompt as one user
// message and max_tokens its output_length; the usage chunk is asked for
// so the answer's cached tokens are reported.
func (p *promptWriter) body(row traceRow) []byte {
	b := make([]byte, 0, row.InputLength*bytesPerToken+192)
	b = append(b, `{"model":"`+replayModel+`","stream":true,"stream_options":{"include_usage":true},"max_tokens":`...)
	b = strconv.AppendInt(b, int64(row.OutputLength), 10)
	b = append(b, `,"messages":[{"role":"user","content":"`...)
	b = p.content(b, row)
	return append(b, `"}]}`...)
}
