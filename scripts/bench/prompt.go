package main

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"
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

// fillerSeed is the PCG stream of the filler text of rows without
// hash_ids, seeded by their line number: another stream than the blocks',
// and the text starts with a letter where every block starts with its id.
const fillerSeed = 0x66696c6c6572 // "filler"

// seed is the PCG seed of block id's words: the id as a uint64 (an int64
// id's two's complement, as it always was), or for an id beyond 64 bits
// the FNV-1a hash of its decimal text.
func (id blockID) seed() uint64 {
	if v, err := strconv.ParseInt(string(id), 10, 64); err == nil {
		return uint64(v)
	}
	if v, err := strconv.ParseUint(string(id), 10, 64); err == nil {
		return v
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// blockText writes block id's text into b, which must be blockBytes long.
func blockText(b []byte, id blockID) {
	n := copy(b, id)
	if n < len(b) { // else an id of 2,048 digits or more: its digits only
		b[n] = ' '
		words(b[n+1:], rand.New(rand.NewPCG(id.seed(), blockSeed)))
	}
}

// words fills b with lowercase words of 2 to 9 letters from rng, each
// followed by a space, the last one cut where b ends.
func words(b []byte, rng *rand.Rand) {
	n := 0
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
	blocks *lru[blockID, []byte]
	// made counts the block texts generated (not found in the cache).
	made int
}

func newPromptWriter(cacheBlocks int) *promptWriter {
	return &promptWriter{blocks: newLRU[blockID, []byte](max(1, cacheBlocks))}
}

func (p *promptWriter) block(id blockID) []byte {
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
// order, cut to input_length × 4 bytes — so at most 2,048 bytes a block,
// shorter than input_length × 4 when input_length exceeds the blocks. A
// row without hash_ids has input_length × 4 bytes of filler words drawn
// from a PCG seeded by its line number.
func (p *promptWriter) content(dst []byte, row traceRow) []byte {
	want := row.InputLength * bytesPerToken
	if len(row.HashIDs) == 0 && want > 0 {
		dst = slices.Grow(dst, want)
		words(dst[len(dst):len(dst)+want], rand.New(rand.NewPCG(uint64(row.Line), fillerSeed)))
		return dst[:len(dst)+want]
	}
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
// message and max_tokens its output_length (1 when that is below 1); the
// usage chunk is asked for so the answer's cached tokens are reported.
func (p *promptWriter) body(row traceRow) []byte {
	b := make([]byte, 0, row.InputLength*bytesPerToken+192)
	b = append(b, `{"model":"`+replayModel+`","stream":true,"stream_options":{"include_usage":true},"max_tokens":`...)
	b = strconv.AppendInt(b, int64(max(1, row.OutputLength)), 10)
	b = append(b, `,"messages":[{"role":"user","content":"`...)
	b = p.content(b, row)
	return append(b, `"}]}`...)
}
