// Package prefix is the memory of the `prefix` balancing policy (SPEC
// §6.7): which prompt prefixes this gateway sent to which replica of an
// arm, so that a request goes where its prefix is likely still in the
// engine's KV cache.
//
// A prompt is named by a block hash chain: Chain cuts the bytes the engine
// will see first into block_bytes blocks and hashes each block together
// with the hash of the one before it, starting from Seed (the upstream
// model, tools and cache_salt). Hash i thus stands for the whole prefix up
// to block i, and two prompts share it exactly when they share that
// prefix. Only full blocks are hashed, because an engine caches only full
// blocks. The hashes are the same in every process (xxHash64, unkeyed), so
// gateways can share them.
//
// An Index, one per arm, keeps for each replica the block hashes sent to
// it, up to cache_tokens × 4 / block_bytes of them, least recently used
// first out, so it forgets roughly when the engine does; a replica's
// entries go with Drop when it leaves the pool or is ejected. Add touches
// a chain's blocks from the last to the first, so every replica always
// holds a prefix of every chain (block i held means blocks 0…i-1 held),
// and Longest finds the longest held prefix with a binary search over the
// chain: about 8 lookups for a 50 KB prompt, not 200.
//
// Memory is at most about 80 bytes per entry: 16,384 blocks × 64 replicas
// is 1,048,576 entries, 80 MB at most (68 bytes an entry measured). With
// prefix.share, Export hands out what Add recorded since the last call (at
// most exportBlocks hashes, oldest dropped first) for the caller to
// publish, and Merge takes what other gateways published.
package prefix
