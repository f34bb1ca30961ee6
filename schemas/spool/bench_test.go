package spool

import (
	"errors"
	"testing"
)

// BenchmarkAppend measures appending a 700-byte record (one write(2), no
// fsync on the path).
func BenchmarkAppend(b *testing.B) {
	s, err := Open(b.TempDir(), 1<<40, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := Record{Kind: 1, Subject: "graygate.request.qwen-32k", ID: "0190c0de-0000-7000-8000-000000000000", Data: make([]byte, 700)}
	b.SetBytes(frameSize(&r))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Append(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextAck measures reading and acknowledging records in order.
func BenchmarkNextAck(b *testing.B) {
	s, err := Open(b.TempDir(), 1<<40, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := Record{Kind: 1, Subject: "graygate.request.qwen-32k", ID: "0190c0de-0000-7000-8000-000000000000", Data: make([]byte, 700)}
	for range b.N {
		if err := s.Append(r); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(frameSize(&r))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, m, err := s.Next()
		if errors.Is(err, ErrEmpty) {
			b.Fatal("spool empty early")
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Ack(m); err != nil {
			b.Fatal(err)
		}
	}
}
