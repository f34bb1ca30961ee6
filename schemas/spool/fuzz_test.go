package spool

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame decoder: it never
// panics, and whatever it accepts encodes back to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	good := appendFrame(nil, &Record{Kind: 2, Subject: "graygate.request.a", ID: "0190c0de-0000-7000-8000-000000000000", Data: []byte(`{"a":1}`)})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(append([]byte(nil), good...), good...))
	f.Add([]byte("GGS1\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("GGS1\xff\xff\xff\xff\x00\x00\x00\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeFrame(b)
		if err != nil {
			if !errors.Is(err, errShort) && !errors.Is(err, errCorrupt) {
				t.Fatalf("decodeFrame() = %v; want errShort or errCorrupt", err)
			}
			return
		}
		if n > len(b) {
			t.Fatalf("decodeFrame() consumed %d of %d bytes", n, len(b))
		}
		if got := appendFrame(nil, &r); !bytes.Equal(got, b[:n]) {
			t.Fatalf("re-encoded frame = %q; want %q", got, b[:n])
		}
	})
}

// FuzzRecordRoundTrip encodes arbitrary valid records and decodes them back.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add(uint8(0), "graygate.request.a", "id", []byte(`{}`))
	f.Add(uint8(7), "s", "GGS1", []byte("GGS1GGS1"))
	f.Fuzz(func(t *testing.T, kind uint8, subject, id string, data []byte) {
		r := Record{Kind: kind, Subject: subject, ID: id, Data: data}
		if validate(&r) != nil {
			return
		}
		b := appendFrame(nil, &r)
		if int64(len(b)) != frameSize(&r) {
			t.Fatalf("frame of %d bytes; frameSize says %d", len(b), frameSize(&r))
		}
		got, n, err := decodeFrame(b)
		if err != nil || n != len(b) || got.Kind != r.Kind || got.Subject != r.Subject || got.ID != r.ID || !bytes.Equal(got.Data, r.Data) {
			t.Fatalf("decodeFrame(appendFrame(%+v)) = %+v, %d, %v", r, got, n, err)
		}
	})
}

// FuzzOpen opens a spool whose only segment holds arbitrary bytes: Open and
// reading never fail or panic, and every record read back is one whose
// frame is in the file.
func FuzzOpen(f *testing.F) {
	var seg []byte
	for i := range 5 {
		r := rec(i, i*3)
		seg = appendFrame(seg, &r)
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	f.Add(append([]byte("GGS1GGS1"), seg[7:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, 1<<20, nil)
		if err != nil {
			t.Fatalf("Open() = %v", err)
		}
		defer s.Close()
		depth, _ := s.Depth()
		var n int64
		for {
			r, m, err := s.Next()
			if errors.Is(err, ErrEmpty) {
				break
			}
			if err != nil {
				t.Fatalf("Next() = %v", err)
			}
			if !bytes.Contains(b, appendFrame(nil, &r)) {
				t.Fatalf("Next() = %+v, not a frame of the file", r)
			}
			n++
			if err := s.Ack(m); err != nil {
				t.Fatalf("Ack() = %v", err)
			}
		}
		if n != depth {
			t.Fatalf("read %d records; Depth() said %d", n, depth)
		}
	})
}
