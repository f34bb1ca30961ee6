package events

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// idBytes parses a canonical id back to its 16 bytes.
func idBytes(t *testing.T, id string) [16]byte {
	t.Helper()
	var u [16]byte
	if _, err := hex.Decode(u[:], []byte(strings.ReplaceAll(id, "-", ""))); err != nil {
		t.Fatalf("id %q is not hex: %v", id, err)
	}
	return u
}

func TestNewIDForm(t *testing.T) {
	for range 1000 {
		id := NewID()
		if err := checkID(id, TypeRequestCompleted); err != nil {
			t.Fatalf("checkID(NewID()) = %v", err)
		}
		if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' || strings.ToLower(id) != id {
			t.Fatalf("NewID() = %q; want lowercase 8-4-4-4-12", id)
		}
		u := idBytes(t, id)
		if v := u[6] >> 4; v != 7 {
			t.Fatalf("NewID() = %q has version %d; want 7", id, v)
		}
		if variant := u[8] >> 6; variant != 0b10 {
			t.Fatalf("NewID() = %q has variant bits %02b; want 10 (RFC 9562)", id, variant)
		}
	}
}

func TestNewIDTime(t *testing.T) {
	for _, at := range []time.Time{
		time.UnixMilli(0), time.UnixMilli(1), time.Date(2025, 3, 14, 15, 9, 26, 535897123, time.UTC),
		time.UnixMilli(1<<48 - 1), // the last millisecond 48 bits hold (year 10889)
	} {
		u := idBytes(t, newID(at))
		var b [8]byte
		copy(b[2:], u[:6])
		if got, want := binary.BigEndian.Uint64(b[:]), uint64(at.UnixMilli()); got != want {
			t.Errorf("newID(%v) holds %d ms; want %d", at, got, want)
		}
	}
}

// TestNewIDOrder checks ordering at millisecond granularity: an id made in
// a later millisecond sorts after every id of an earlier one.
func TestNewIDOrder(t *testing.T) {
	base := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
	prev := newID(base)
	for i := 1; i < 2000; i++ {
		id := newID(base.Add(time.Duration(i) * time.Millisecond))
		if id <= prev {
			t.Fatalf("newID(+%dms) = %s sorts before or equal to the previous millisecond's %s", i, id, prev)
		}
		prev = id
	}
	// Real clock: the millisecond prefix never goes back.
	prev = NewID()
	for range 100_000 {
		id := NewID()
		if id[:13] < prev[:13] {
			t.Fatalf("NewID() = %s after %s: time went back", id, prev)
		}
		prev = id
	}
}

func TestNewIDUnique(t *testing.T) {
	const n = 100_000
	seen := make(map[string]struct{}, n)
	at := time.Now()
	for range n {
		id := newID(at) // one millisecond: only the random bits differ
		if _, dup := seen[id]; dup {
			t.Fatalf("newID returned %s twice in %d ids", id, len(seen))
		}
		seen[id] = struct{}{}
	}
}

func TestNewIDAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = NewID() }); n > 1 {
		t.Errorf("NewID allocates %v times; want 1 (the string)", n)
	}
}
