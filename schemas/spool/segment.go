package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const segExt = ".seg"

// segment is one append-only file of frames. Only the newest segment is
// appended to; the others are sealed.
type segment struct {
	seq     uint64
	size    int64 // bytes in the file
	records int   // valid frames
	kinds   [MaxKinds]int
	bad     []span // corrupt regions, sorted, skipped by the reader
}

// span is a corrupt region [from, to) of a segment.
type span struct{ from, to int64 }

func segName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segExt) }

func parseSegName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, segExt)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	return seq, err == nil && seq > 0
}

func segPath(dir string, seq uint64) string { return filepath.Join(dir, segName(seq)) }

// skipBad returns off moved past a known corrupt region starting at or
// covering off.
func (g *segment) skipBad(off int64) int64 {
	for _, b := range g.bad {
		if off >= b.from && off < b.to {
			off = b.to
		}
	}
	return off
}

// addBad records a corrupt region, keeping the list sorted.
func (g *segment) addBad(s span) {
	i, _ := slices.BinarySearchFunc(g.bad, s.from, func(b span, from int64) int {
		switch {
		case b.from < from:
			return -1
		case b.from > from:
			return 1
		}
		return 0
	})
	g.bad = slices.Insert(g.bad, i, s)
}

// window reads a segment file through a buffer, so that reading records in
// order costs one system call per buffer rather than two per record.
type window struct {
	f   *os.File
	seq uint64
	buf []byte
	off int64 // file offset of buf[0]
	n   int   // valid bytes in buf
}

const windowSize = 64 << 10

func (w *window) close() {
	if w.f != nil {
		w.f.Close()
	}
	*w = window{buf: w.buf}
}

// open points the window at segment seq of dir.
func (w *window) open(dir string, seq uint64) error {
	if w.f != nil && w.seq == seq {
		return nil
	}
	w.close()
	f, err := os.Open(segPath(dir, seq))
	if err != nil {
		return err
	}
	w.f, w.seq = f, seq
	return nil
}

// at returns up to want bytes starting at off, never reaching limit. It
// returns fewer bytes only when limit is reached. The slice is valid until
// the next call.
func (w *window) at(off, limit int64, want int) ([]byte, error) {
	if off >= limit {
		return nil, nil
	}
	if end := off + int64(want); end > limit {
		want = int(max(limit-off, 0))
	}
	if off >= w.off && off+int64(want) <= w.off+int64(w.n) {
		return w.buf[off-w.off : off-w.off+int64(want)], nil
	}
	size := max(want, windowSize)
	if int64(size) > limit-off {
		size = int(limit - off)
	}
	if cap(w.buf) < size {
		w.buf = make([]byte, max(size, windowSize))
	}
	w.buf = w.buf[:cap(w.buf)]
	n, err := w.f.ReadAt(w.buf[:size], off)
	w.off, w.n = off, n
	if err != nil && !errors.Is(err, io.EOF) {
		w.n = 0
		return nil, fmt.Errorf("read %s at %d: %w", w.f.Name(), off, err)
	}
	// A file shorter than limit (removed or truncated under us) reads as a
	// truncated record.
	return w.buf[:min(n, want)], nil
}

// frame parses the frame at off. It returns errShort when the segment ends
// inside the frame, errCorrupt when the bytes are not a frame, or an I/O
// error.
func (w *window) frame(off, limit int64) (frame, error) {
	b, err := w.at(off, limit, headerSize)
	if err != nil {
		return frame{}, err
	}
	n, err := frameLen(b)
	if err != nil {
		return frame{}, err
	}
	if b, err = w.at(off, limit, n); err != nil {
		return frame{}, err
	}
	return parseFrame(b)
}

// resync returns the offset of the first valid frame at or after from, or
// limit when there is none.
func (w *window) resync(from, limit int64) (int64, error) {
	off := from
	for off < limit {
		b, err := w.at(off, limit, windowSize)
		if err != nil {
			return 0, err
		}
		if len(b) < len(magic) {
			return limit, nil
		}
		i := bytes.Index(b, magic[:])
		if i < 0 {
			// Keep the last bytes: the magic may straddle the boundary.
			off += int64(len(b) - len(magic) + 1)
			continue
		}
		cand := off + int64(i)
		_, err = w.frame(cand, limit)
		switch {
		case err == nil:
			return cand, nil
		case errors.Is(err, errShort), errors.Is(err, errCorrupt):
			off = cand + 1
		default:
			return 0, err
		}
	}
	return limit, nil
}

// scan reads every frame of segment g, counting records by kind and
// recording corrupt regions. It calls visit with the end offset of each
// valid frame.
func (w *window) scan(g *segment, visit func(end int64, kind uint8)) error {
	g.records, g.kinds, g.bad = 0, [MaxKinds]int{}, nil
	for off := int64(0); off < g.size; {
		f, err := w.frame(off, g.size)
		if err == nil {
			off += int64(f.n)
			g.records++
			g.kinds[f.kind]++
			if visit != nil {
				visit(off, f.kind)
			}
			continue
		}
		if !errors.Is(err, errShort) && !errors.Is(err, errCorrupt) {
			return err
		}
		next, err := w.resync(off+1, g.size)
		if err != nil {
			return err
		}
		g.bad = append(g.bad, span{off, next})
		off = next
	}
	return nil
}
