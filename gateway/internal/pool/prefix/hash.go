package prefix

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// seedTag names this hashing scheme. Gateways share block hashes over NATS,
// so a gateway that hashed differently must never produce the same numbers:
// a change to Seed or Chain changes the tag.
const seedTag = "graygate/prefix/v1"

// Seed returns the hash that block 0 of a chain is chained to: it covers
// the upstream model, the request's raw tools value and its cache_salt (nil
// or empty when absent), so two requests share blocks only when the engine
// could share their KV cache. Each field is length-prefixed, so no two
// different triples give the same input. Seed is deterministic across
// processes and machines (xxHash64, no per-process key).
func Seed(model string, tools, cacheSalt []byte) uint64 {
	var d xxhash.Digest
	d.Reset()
	var n [8]byte
	_, _ = d.WriteString(seedTag)
	binary.LittleEndian.PutUint64(n[:], uint64(len(model)))
	_, _ = d.Write(n[:])
	_, _ = d.WriteString(model)
	binary.LittleEndian.PutUint64(n[:], uint64(len(tools)))
	_, _ = d.Write(n[:])
	_, _ = d.Write(tools)
	binary.LittleEndian.PutUint64(n[:], uint64(len(cacheSalt)))
	_, _ = d.Write(n[:])
	_, _ = d.Write(cacheSalt)
	return d.Sum64()
}

// Chain cuts prompt into blocks of blockBytes bytes and appends their hash
// chain to dst: h[-1] = seed, h[i] = xxHash64(block i) with h[i-1] as the
// seed of the hash, so h[i] covers the seed and blocks 0…i, and two prompts
// share h[i] exactly when they share the seed and their first (i+1) ×
// blockBytes bytes (up to a 64-bit collision).
//
// Only full blocks are hashed: a trailing partial block is left out,
// because an engine caches only full blocks, so it can never be found in
// a replica's cache by the next request. A prompt shorter than blockBytes
// appends nothing.
//
// Chain does not allocate when dst has room for len(prompt)/blockBytes
// more hashes. It panics if blockBytes is not positive (the config
// validates it). The hashes are deterministic across processes and
// machines, which sharing them between gateways requires; they are not
// keyed, so a client can make its own prompts collide, which costs it
// a cache miss and nobody else anything.
func Chain(dst []uint64, seed uint64, prompt []byte, blockBytes int) []uint64 {
	if blockBytes <= 0 {
		panic("prefix: Chain with blockBytes <= 0")
	}
	n := len(prompt) / blockBytes
	dst = grow(dst, n)
	h := seed
	var d xxhash.Digest
	for i := 0; i < n; i++ {
		d.ResetWithSeed(h)
		_, _ = d.Write(prompt[i*blockBytes : (i+1)*blockBytes])
		h = d.Sum64()
		dst = append(dst, h)
	}
	return dst
}

// grow makes room for n more elements in s, allocating at most once.
func grow(s []uint64, n int) []uint64 {
	if cap(s)-len(s) >= n {
		return s
	}
	t := make([]uint64, len(s), len(s)+n)
	copy(t, s)
	return t
}
