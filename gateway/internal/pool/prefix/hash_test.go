package prefix

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestChainBlocks(t *testing.T) {
	seed := Seed("m", nil, nil)
	for _, tc := range []struct {
		name   string
		len    int
		blocks int
	}{
		{"empty", 0, 0},
		{"partial only", 255, 0},
		{"one block", 256, 1},
		{"one block and a partial", 511, 1},
		{"four blocks", 1024, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Chain(nil, seed, make([]byte, tc.len), 256)
			if len(got) != tc.blocks {
				t.Errorf("len(Chain(%d bytes)) = %d; want %d", tc.len, len(got), tc.blocks)
			}
		})
	}
}

// TestChainPrefix checks that two prompts share h[i] exactly when they
// share blocks 0…i, and that the trailing partial block changes nothing.
func TestChainPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	a := make([]byte, 64*10+17)
	for i := range a {
		a[i] = byte(r.Uint32())
	}
	seed := Seed("m", []byte(`[{"type":"function"}]`), nil)
	ha := Chain(nil, seed, a, 64)
	for diff := 0; diff < len(a); diff += 37 {
		b := bytes.Clone(a)
		b[diff] ^= 1
		hb := Chain(nil, seed, b, 64)
		for i := range ha {
			same := ha[i] == hb[i]
			want := diff >= (i+1)*64 // blocks 0…i equal
			if same != want {
				t.Fatalf("flip at %d: h[%d] equal = %v; want %v", diff, i, same, want)
			}
		}
	}
}

func TestSeed(t *testing.T) {
	base := Seed("m", []byte("t"), []byte("s"))
	for _, tc := range []struct {
		name string
		seed uint64
	}{
		{"model", Seed("n", []byte("t"), []byte("s"))},
		{"tools", Seed("m", []byte("u"), []byte("s"))},
		{"salt", Seed("m", []byte("t"), []byte("x"))},
		{"no salt", Seed("m", []byte("t"), nil)},
		{"field boundary", Seed("mt", nil, []byte("s"))},
		{"field shift", Seed("m", nil, []byte("ts"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.seed == base {
				t.Errorf("Seed differing in %s = %#x; want != %#x", tc.name, tc.seed, base)
			}
		})
	}
	// Same prompt, different seed: every block differs.
	p := make([]byte, 512)
	if a, b := Chain(nil, base, p, 256), Chain(nil, Seed("n", nil, nil), p, 256); a[0] == b[0] || a[1] == b[1] {
		t.Errorf("chains under two seeds share a hash: %x %x", a, b)
	}
}

// TestChainStable pins the hashes: gateways of different builds share them
// over NATS, so a change here is a wire change (bump seedTag).
func TestChainStable(t *testing.T) {
	p := []byte("You are a helpful assistant.\nuser\nHello, world! What is 2+2?\n")
	got := Chain(nil, Seed("llama-3.1-8b", nil, nil), p, 16)
	want := "[0xaf62d0ad60badb5 0xa1bce26f793426af 0xc5d049975e70001d]"
	if s := fmt.Sprintf("%#x", got); s != want {
		t.Errorf("Chain(...) = %s; want %s", s, want)
	}
}

func TestChainNoAlloc(t *testing.T) {
	p := make([]byte, 64<<10)
	dst := make([]uint64, 0, 256)
	seed := Seed("m", nil, nil)
	if n := testing.AllocsPerRun(10, func() { dst = Chain(dst[:0], seed, p, 256) }); n != 0 {
		t.Errorf("Chain allocs = %v; want 0", n)
	}
	if n := testing.AllocsPerRun(10, func() { _ = Seed("m", []byte("tools"), []byte("salt")) }); n != 0 {
		t.Errorf("Seed allocs = %v; want 0", n)
	}
}

func BenchmarkChain(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			p := make([]byte, size)
			for i := range p {
				p[i] = byte(i * 7)
			}
			seed := Seed("m", nil, nil)
			dst := make([]uint64, 0, size/256)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				dst = Chain(dst[:0], seed, p, 256)
			}
		})
	}
}
