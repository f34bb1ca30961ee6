package main

import (
	"encoding/binary"
	"hash/maphash"
)

// The engine sees a prompt as its rendered text (SPEC §6.7): for a chat
// request, each message's role, a newline, its content and a newline, in
// order; for a completion, the prompt. The text has ⌈bytes/4⌉ tokens.

// blockSeed keys the block hashes. Hashes never leave the process, so a
// per-process seed is enough.
var blockSeed = maphash.MakeSeed()

// promptTokenCount is the token count of a rendered prompt of n bytes.
func promptTokenCount(n int) int { return (n + bytesPerToken - 1) / bytesPerToken }

// blockHashes returns the chain hashes of the full blocks of text: hash i
// covers blocks 0…i (it hashes hash i-1 and block i's bytes). The final
// partial block, if any, is not named: like vLLM, the engine caches only
// full blocks.
func blockHashes(text []byte) []uint64 {
	n := len(text) / blockBytes
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	var h maphash.Hash
	h.SetSeed(blockSeed)
	var prev [8]byte
	for i := range n {
		h.Reset()
		_, _ = h.Write(prev[:])
		_, _ = h.Write(text[i*blockBytes : (i+1)*blockBytes])
		out[i] = h.Sum64()
		binary.LittleEndian.PutUint64(prev[:], out[i])
	}
	return out
}

// renderChat appends the rendered text of chat messages to dst.
func renderChat(dst []byte, msgs []chatMessage) ([]byte, error) {
	for _, m := range msgs {
		text, _, err := messageText(m.Content, true)
		if err != nil {
			return dst, err
		}
		dst = append(dst, m.Role...)
		dst = append(dst, '\n')
		dst = append(dst, text...)
		dst = append(dst, '\n')
	}
	return dst, nil
}
