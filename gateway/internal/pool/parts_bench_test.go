package pool

import (
	"math/rand/v2"
	"testing"

	"github.com/graygate/graygate/gateway/internal/pool/prefix"
)

// BenchmarkPrefixParts splits the prefix decision: Longest (the
// lookup) and Add (recording the chain as sent), on an index where 64
// chains of 200 blocks are held by one replica each of 8.
func BenchmarkPrefixParts(b *testing.B) {
	x := prefix.New(16384, shareBlocks)
	rng := rand.New(rand.NewPCG(7, 8))
	chains := make([][]uint64, 64)
	for i := range chains {
		chains[i] = make([]uint64, 200)
		for j := range chains[i] {
			chains[i][j] = rng.Uint64()
		}
		x.Add(int32(i%8), chains[i])
	}
	all := func(int32) bool { return true }
	b.Run("longest", func(b *testing.B) {
		var buf [16]int32
		for i := 0; b.Loop(); i++ {
			x.Longest(chains[i%64], all, buf[:0])
		}
	})
	b.Run("add_held", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			x.Add(int32(i%64%8), chains[i%64])
		}
	})
	b.Run("add_new", func(b *testing.B) {
		c := make([]uint64, 200)
		for i := 0; b.Loop(); i++ {
			for j := range c {
				c[j] = rng.Uint64()
			}
			x.Add(int32(i%8), c)
		}
	})
}
