package pool_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/graygate/graygate/gateway/internal/pool"
	"github.com/graygate/graygate/schemas/config"
)

// BenchmarkPick is the balancing decision alone (SPEC §12: at most
// 2 µs): the chains are hashed beforehand. For prefix, each of 64
// chains of 200 blocks is held by the replica that took it first.
// "+sent" adds recording the chain (Sent, outside the decision): "held"
// re-sends a held chain, "new" a chain no replica holds.
func BenchmarkPick(b *testing.B) {
	for _, policy := range []string{config.BalanceRoundRobin, config.BalanceLeastLoaded, config.BalancePrefix} {
		for _, n := range []int{8, 64} {
			b.Run(fmt.Sprintf("%s/%d", policy, n), func(b *testing.B) {
				p, hints := warmed(b, policy, n)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					p.Pick(&hints[i%len(hints)], nil)
				}
			})
		}
	}
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("prefix+sent/held/%d", n), func(b *testing.B) {
			p, hints := warmed(b, config.BalancePrefix, n)
			for i := 0; b.Loop(); i++ {
				h := &hints[i%len(hints)]
				p.Sent(p.Pick(h, nil), h)
			}
		})
		b.Run(fmt.Sprintf("prefix/new/%d", n), func(b *testing.B) {
			p, hints := warmed(b, config.BalancePrefix, n)
			h := &pool.Hint{Chain: make([]uint64, 200)}
			for i := 0; b.Loop(); i++ {
				fresh(h.Chain, hints[i%len(hints)].Chain, i)
				p.Pick(h, nil)
			}
		})
		b.Run(fmt.Sprintf("prefix+sent/new/%d", n), func(b *testing.B) {
			p, hints := warmed(b, config.BalancePrefix, n)
			h := &pool.Hint{Chain: make([]uint64, 200)}
			for i := 0; b.Loop(); i++ {
				fresh(h.Chain, hints[i%len(hints)].Chain, i)
				p.Sent(p.Pick(h, nil), h)
			}
		})
	}
}

// warmed is a pool of n replicas under policy and 64 chains of 200
// blocks, each sent once.
func warmed(b *testing.B, policy string, n int) (*pool.Pool, []pool.Hint) {
	p := newPool(b, upstreamOf(policy, fakeURLs(n)...), nil)
	rng := rand.New(rand.NewPCG(7, 8))
	hints := make([]pool.Hint, 64)
	for i := range hints {
		hints[i].Chain = chain(rng, 200)
		send(p, &hints[i])
	}
	return p, hints
}

// fresh fills dst with a chain no replica holds (base mixed with i).
func fresh(dst, base []uint64, i int) {
	salt := uint64(i+1) * 0x9e3779b97f4a7c15
	for j := range dst {
		dst[j] = base[j] ^ salt
	}
}
