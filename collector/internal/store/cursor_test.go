package store

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
)

// FuzzDecodeCursor: a cursor is untrusted client input. Whatever the
// bytes, decodeCursor either refuses them with a *ParamError naming
// "cursor" (so the API answers 400, never 5xx) or returns a time within
// MinTime–MaxTime — never one Postgres would refuse — and every cursor
// encodeCursor makes decodes back to its key.
func FuzzDecodeCursor(f *testing.F) {
	id := uuid.MustParse("0195936b-9f4a-7c3e-8d2b-5a6f7e8d9c0b")
	for _, at := range []time.Time{time.Unix(1741964400, 123456000), MinTime, MaxTime} {
		f.Add(encodeCursor(at, id))
	}
	for _, micros := range []int64{math.MinInt64, math.MaxInt64, -1, 0, MinTime.UnixMicro() - 1, MaxTime.UnixMicro() + 1,
		time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()} {
		var b [24]byte
		binary.BigEndian.PutUint64(b[:8], uint64(micros))
		f.Add(base64.RawURLEncoding.EncodeToString(b[:]))
	}
	for _, s := range []string{"", "abc", "====", "********************************", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		at, got, err := decodeCursor(s)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param != "cursor" || !errors.Is(err, ErrBadCursor) {
				t.Fatalf("decodeCursor(%q) error %v (%T); want a *ParamError naming cursor that wraps ErrBadCursor", s, err, err)
			}
			return
		}
		if !InRange(at) {
			t.Fatalf("decodeCursor(%q) = %v; want a time within %v–%v", s, at, MinTime, MaxTime)
		}
		back := encodeCursor(at, uuid.UUID(got.Bytes))
		if at2, id2, err := decodeCursor(back); err != nil || !at2.Equal(at) || id2 != got {
			t.Fatalf("decodeCursor(encodeCursor(%v, %v)) = %v, %v, %v; want the same key", at, got, at2, id2, err)
		}
	})
}

// TestCursorBounds: the ends of the stored range are cursors; one
// microsecond past either end is not.
func TestCursorBounds(t *testing.T) {
	id := uuid.New()
	for _, tc := range []struct {
		micros int64
		ok     bool
	}{
		{MinTime.UnixMicro(), true},
		{MaxTime.UnixMicro(), true},
		{MinTime.UnixMicro() - 1, false},
		{MaxTime.UnixMicro() + 1, false},
	} {
		var b [24]byte
		binary.BigEndian.PutUint64(b[:8], uint64(tc.micros))
		copy(b[8:], id[:])
		at, _, err := decodeCursor(base64.RawURLEncoding.EncodeToString(b[:]))
		if (err == nil) != tc.ok {
			t.Errorf("decodeCursor(µs %d) = %v, %v; want accepted %v", tc.micros, at, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrTimeOutOfRange) {
			t.Errorf("decodeCursor(µs %d) error %v; want ErrTimeOutOfRange", tc.micros, err)
		}
	}
}
