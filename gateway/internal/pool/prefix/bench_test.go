package prefix

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmark state, as a full pool looks: every replica's cache (16384
// blocks of 256 bytes) filled with 50 KB prompts (200 blocks) that begin
// with the same 2 KB system prompt, and requests that continue one of the
// conversations a replica holds: the first 150 blocks held by that replica
// (the system prompt by all), 50 new.
const (
	benchCapacity = 1048576 * 4 / 256
	benchSystem   = 8
	benchBlocks   = 200
	benchHeld     = 150
	benchRequests = 4096
)

type benchPool struct {
	x        *Index
	requests [][]uint64
	owners   []int32
	load     []int
	serving  []bool
}

func newBenchPool(b *testing.B, replicas int) *benchPool {
	r := rand.New(rand.NewPCG(uint64(replicas), 11))
	p := &benchPool{x: New(benchCapacity, 0), load: make([]int, replicas), serving: make([]bool, replicas)}
	system := make([]uint64, benchSystem)
	for i := range system {
		system[i] = r.Uint64()
	}
	const perReplica = benchCapacity/(benchBlocks-benchSystem) + 20 // full, and some evicted
	recent := make([][][]uint64, replicas)
	for id := range replicas {
		p.load[id] = r.IntN(10)
		p.serving[id] = true
		for k := range perReplica {
			ch := append(make([]uint64, 0, benchBlocks), system...)
			for len(ch) < benchBlocks {
				ch = append(ch, r.Uint64())
			}
			p.x.Add(int32(id), ch)
			if k >= perReplica-50 {
				recent[id] = append(recent[id], ch)
			}
		}
		if p.x.EntriesOf(int32(id)) != benchCapacity {
			b.Fatalf("replica %d holds %d blocks; want %d", id, p.x.EntriesOf(int32(id)), benchCapacity)
		}
	}
	for range benchRequests {
		id := r.IntN(replicas)
		held := recent[id][r.IntN(len(recent[id]))]
		req := append(make([]uint64, 0, benchBlocks), held[:benchHeld]...)
		for len(req) < benchBlocks {
			req = append(req, r.Uint64())
		}
		p.requests = append(p.requests, req)
		p.owners = append(p.owners, int32(id))
	}
	return p
}

// decide is what the prefix policy does with a request's chain, hashing
// aside: find the longest held prefix and, among its holders, the one with
// the lowest load, if the match is at least half the request (min_match).
func (p *benchPool) decide(x *Index, chain []uint64, serving func(int32) bool, buf []int32) (int32, []int32) {
	n, holders := x.Longest(chain, serving, buf[:0])
	if n*2 < len(chain) {
		return -1, holders
	}
	best := holders[0]
	for _, h := range holders[1:] {
		if p.load[h] < p.load[best] {
			best = h
		}
	}
	return best, holders
}

// BenchmarkLongest measures the decision for requests spread over the
// whole index (not one request again and again, which would find it in the
// CPU's cache).
func BenchmarkLongest(b *testing.B) {
	for _, replicas := range []int{8, 64} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			p := newBenchPool(b, replicas)
			serving := func(id int32) bool { return p.serving[id] }
			buf := make([]int32, 0, replicas)
			for i, req := range p.requests {
				if got, _ := p.decide(p.x, req, serving, buf); got != p.owners[i] {
					b.Fatalf("request %d went to %d; want %d", i, got, p.owners[i])
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, buf = p.decide(p.x, p.requests[i%benchRequests], serving, buf)
				i++
			}
		})
	}
}

// BenchmarkAdd measures recording a request sent: 150 blocks the replica
// holds and 50 new ones, which evict 50 of its least recently used.
func BenchmarkAdd(b *testing.B) {
	for _, replicas := range []int{8, 64} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			p := newBenchPool(b, replicas)
			next := uint64(1) << 63
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := p.requests[i%benchRequests]
				for j := benchHeld; j < benchBlocks; j++ {
					req[j] = next // blocks never seen
					next++
				}
				p.x.Add(p.owners[i%benchRequests], req)
				i++
			}
		})
	}
}

// BenchmarkRequestParallel runs what every request does, Longest then Add,
// from as many goroutines as GOMAXPROCS, all on one index: the cost of
// sharing its lock.
func BenchmarkRequestParallel(b *testing.B) {
	p := newBenchPool(b, 8)
	serving := func(id int32) bool { return p.serving[id] }
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]int32, 0, 8)
		i := rand.IntN(benchRequests)
		for pb.Next() {
			req := p.requests[i%benchRequests]
			var id int32
			id, buf = p.decide(p.x, req, serving, buf)
			if id < 0 {
				id = 0
			}
			p.x.Add(id, req)
			i++
		}
	})
}
