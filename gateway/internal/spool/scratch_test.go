package spool

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

func TestScratchRandom(t *testing.T) {
	var seg []byte
	for i := range 5 {
		r := rec(i, i*3)
		seg = appendFrame(seg, &r)
	}
	rng := rand.New(rand.NewSource(1))
	for it := 0; it < 3000; it++ {
		b := append([]byte(nil), seg...)
		switch rng.Intn(3) {
		case 0:
			for k := 0; k < 1+rng.Intn(4); k++ {
				b[rng.Intn(len(b))] = byte(rng.Intn(256))
			}
		case 1:
			b = b[:rng.Intn(len(b))]
		case 2:
			b = b[rng.Intn(len(b)):]
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, segName(1)), b, 0o600)
		s, err := Open(dir, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; ; n++ {
			if n > 100 {
				t.Fatalf("loop on %q", b)
			}
			_, m, err := s.Next()
			if errors.Is(err, ErrEmpty) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			s.Ack(m)
		}
		s.Close()
	}
}
