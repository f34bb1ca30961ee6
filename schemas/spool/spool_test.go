package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rec makes the i-th test record; pad varies the size.
func rec(i, pad int) Record {
	return Record{
		Kind:    uint8(i % 4),
		Subject: fmt.Sprintf("graygate.request.dep%d", i%3),
		ID:      fmt.Sprintf("id-%06d", i),
		Data:    []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, make([]byte, pad))),
	}
}

func open(t *testing.T, dir string, maxBytes int64) *Spool {
	t.Helper()
	s, err := Open(dir, maxBytes, nil)
	if err != nil {
		t.Fatalf("Open(%s, %d) = %v", dir, maxBytes, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// crash releases s the way a killed process does: no sync, no cursor save.
func crash(s *Spool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.w != nil {
		s.w.Close()
	}
	s.rw.close()
	s.closed = true
	unlockDir(s.lock)
}

// drain reads every waiting record, acknowledging each when ack is set.
func drain(t *testing.T, s *Spool, ack bool) []Record {
	t.Helper()
	var out []Record
	for {
		r, m, err := s.Next()
		if errors.Is(err, ErrEmpty) {
			return out
		}
		if err != nil {
			t.Fatalf("Next() = %v", err)
		}
		out = append(out, r)
		if ack {
			if err := s.Ack(m); err != nil {
				t.Fatalf("Ack() = %v", err)
			}
		}
	}
}

func ids(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func wantIDs(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("id-%06d", i))
	}
	return out
}

func appendN(t *testing.T, s *Spool, from, to, pad int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.Append(rec(i, pad)); err != nil {
			t.Fatalf("Append(%d) = %v", i, err)
		}
	}
}

func TestReopenResumes(t *testing.T) {
	tests := []struct {
		name     string
		n, acked int
		pad      int
		maxBytes int64
		crash    bool // end the first run without Close
	}{
		{"empty", 0, 0, 10, 1 << 20, false},
		{"nothing acked", 50, 0, 10, 1 << 20, false},
		{"some acked one segment", 50, 20, 10, 1 << 20, false},
		{"some acked many segments", 300, 170, 40, 256 << 10, false},
		{"all acked", 300, 300, 40, 256 << 10, false},
		{"crash after acks", 300, 170, 40, 256 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, tt.maxBytes)
			appendN(t, s, 0, tt.n, tt.pad)
			for i := 0; i < tt.acked; i++ {
				r, m, err := s.Next()
				if err != nil {
					t.Fatalf("Next() = %v", err)
				}
				if r.ID != fmt.Sprintf("id-%06d", i) {
					t.Fatalf("record %d has id %s", i, r.ID)
				}
				if err := s.Ack(m); err != nil {
					t.Fatal(err)
				}
			}
			if tt.crash {
				crash(s)
			} else if err := s.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}

			s = open(t, dir, tt.maxBytes)
			defer s.Close()
			recs, _ := s.Depth()
			got := drain(t, s, false)
			from := tt.acked
			if tt.crash {
				// The cursor may not have been saved: records are delivered
				// again from an earlier point, never lost.
				from = tt.n - len(got)
				if from > tt.acked {
					t.Errorf("after a crash delivery resumes at %d; want at most %d", from, tt.acked)
				}
			}
			if recs != int64(tt.n-from) {
				t.Errorf("Depth() records = %d; want %d", recs, tt.n-from)
			}
			if want := wantIDs(from, tt.n); !slices.Equal(ids(got), want) {
				t.Errorf("after reopen ids = %v; want %v", ids(got), want)
			}
			for i, r := range got {
				if w := rec(from+i, tt.pad); r.Subject != w.Subject || r.Kind != w.Kind || string(r.Data) != string(w.Data) {
					t.Fatalf("record %d = %+v; want %+v", from+i, r, w)
				}
			}
			if st := s.Stats(); st.Corrupt != 0 {
				t.Errorf("Stats().Corrupt = %d; want 0", st.Corrupt)
			}
		})
	}
}

func TestCrashKeepsSavedCursor(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 64<<10)
	appendN(t, s, 0, 100, 40)
	var last Mark
	for range 60 {
		_, m, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		last = m
	}
	if err := s.Ack(last); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	// Acknowledged later but never saved: delivered again.
	for range 10 {
		_, m, _ := s.Next()
		s.Ack(m)
	}
	crash(s)
	s = open(t, dir, 64<<10)
	defer s.Close()
	if got, want := ids(drain(t, s, true)), wantIDs(60, 100); !slices.Equal(got, want) {
		t.Errorf("after crash ids = %v; want %v", got, want)
	}
	if recs, bytes := s.Depth(); recs != 0 || bytes != 0 {
		t.Errorf("Depth() after draining = %d, %d; want 0, 0", recs, bytes)
	}
	if segs := segFiles(t, dir); len(segs) != 0 {
		t.Errorf("segment files after draining = %v; want none", segs)
	}
}

func TestRewind(t *testing.T) {
	s := open(t, t.TempDir(), 64<<10)
	defer s.Close()
	appendN(t, s, 0, 200, 40)
	var marks []Mark
	for range 120 {
		_, m, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		marks = append(marks, m)
	}
	s.Ack(marks[49])
	s.Rewind()
	if got, want := ids(drain(t, s, false)), wantIDs(50, 200); !slices.Equal(got, want) {
		t.Errorf("after Rewind ids = %v; want %v", got, want)
	}
	// A late acknowledgement of an older mark changes nothing.
	s.Ack(marks[10])
	s.Rewind()
	if r, _, _ := s.Next(); r.ID != "id-000050" {
		t.Errorf("after stale Ack, Next().ID = %s; want id-000050", r.ID)
	}
}

func TestInterleaved(t *testing.T) {
	// The publisher appends while the drainer reads the same segment.
	s := open(t, t.TempDir(), 1<<20)
	defer s.Close()
	var got []string
	next := 0
	for round := range 50 {
		appendN(t, s, next, next+round%7, 10)
		next += round % 7
		for range round % 5 {
			r, m, err := s.Next()
			if errors.Is(err, ErrEmpty) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.ID)
			s.Ack(m)
		}
	}
	got = append(got, ids(drain(t, s, true))...)
	if want := wantIDs(0, next); !slices.Equal(got, want) {
		t.Errorf("ids = %v; want %v", got, want)
	}
}

func TestBoundDropsOldest(t *testing.T) {
	size := frameSize(&Record{Subject: "graygate.request.dep0", ID: "id-000000", Data: []byte(rec(0, 100).Data)})
	tests := []struct {
		name     string
		maxBytes int64
		n, acked int
	}{
		{"nothing acked", 20 * size, 100, 0},
		{"head partly acked", 20 * size, 100, 3},
		{"tiny bound, one record per segment", 2 * size, 10, 0},
		{"bound of one record", size, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, tt.maxBytes)
			defer s.Close()
			for i := range tt.n {
				if err := s.Append(rec(i, 100)); err != nil {
					t.Fatalf("Append(%d) = %v", i, err)
				}
				if i < tt.acked {
					_, m, _ := s.Next()
					s.Ack(m)
				}
				if st := s.Stats(); st.DiskBytes > tt.maxBytes || diskBytes(t, dir) > tt.maxBytes {
					t.Fatalf("after %d appends segment files hold %d (counted %d) bytes; bound %d", i+1, diskBytes(t, dir), st.DiskBytes, tt.maxBytes)
				}
			}
			st := s.Stats()
			var dropped uint64
			for _, d := range st.Dropped {
				dropped += d
			}
			if dropped == 0 {
				t.Fatalf("Stats().Dropped = %v; want some", st.Dropped)
			}
			got := drain(t, s, true)
			// Whatever was not dropped is the newest records, in order.
			if want := wantIDs(tt.n-len(got), tt.n); !slices.Equal(ids(got), want) {
				t.Errorf("kept ids = %v; want %v", ids(got), want)
			}
			if int(dropped)+len(got)+tt.acked != tt.n {
				t.Errorf("dropped %d + kept %d + acked %d; want %d in all", dropped, len(got), tt.acked, tt.n)
			}
			var byKind [MaxKinds]uint64
			for i := tt.acked; i < tt.n-len(got); i++ {
				byKind[rec(i, 0).Kind]++
			}
			if st.Dropped != byKind {
				t.Errorf("Stats().Dropped = %v; want %v", st.Dropped, byKind)
			}
		})
	}
}

func TestReopenWithSmallerBound(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 128<<10)
	appendN(t, s, 0, 200, 100)
	s.Close()
	s = open(t, dir, 32<<10)
	defer s.Close()
	if d := diskBytes(t, dir); d > 32<<10 {
		t.Errorf("segment files hold %d bytes; bound %d", d, 32<<10)
	}
	got := drain(t, s, true)
	if len(got) == 0 || got[len(got)-1].ID != "id-000199" {
		t.Errorf("kept %d records ending %v; want the newest", len(got), ids(got))
	}
}

func TestAppendErrors(t *testing.T) {
	s := open(t, t.TempDir(), 4096)
	tests := []struct {
		name string
		r    Record
		want error
	}{
		{"kind out of range", Record{Kind: MaxKinds, Subject: "a", ID: "b"}, ErrBadRecord},
		{"empty subject", Record{ID: "b"}, ErrBadRecord},
		{"empty id", Record{Subject: "a"}, ErrBadRecord},
		{"long id", Record{Subject: "a", ID: string(make([]byte, 256))}, ErrBadRecord},
		{"larger than the bound", Record{Subject: "a", ID: "b", Data: make([]byte, 4096)}, ErrTooLarge},
		{"fits", Record{Subject: "a", ID: "b", Data: make([]byte, 4000)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Append(tt.r); !errors.Is(err, tt.want) {
				t.Errorf("Append() = %v; want %v", err, tt.want)
			}
		})
	}
	s.Close()
	if err := s.Append(rec(0, 0)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v; want ErrClosed", err)
	}
	if _, _, err := s.Next(); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v; want ErrClosed", err)
	}
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 4096)
	if _, err := Open(dir, 4096, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open = %v; want ErrLocked", err)
	}
	s.Close()
	s2 := open(t, dir, 4096)
	s2.Close()
}

// damage describes how a test breaks a closed spool's files.
type damage func(t *testing.T, seg []byte, frames []int64) []byte

func TestDamagedSegments(t *testing.T) {
	// One segment of 20 records; frames[i] is where record i starts.
	tests := []struct {
		name    string
		damage  damage
		lost    []int // records that cannot be read back
		corrupt uint64
	}{
		{"flipped body byte", func(t *testing.T, b []byte, f []int64) []byte {
			b[f[7]+headerSize+5] ^= 0xff
			return b
		}, []int{7}, 1},
		{"broken magic", func(t *testing.T, b []byte, f []int64) []byte {
			b[f[3]] = 'X'
			return b
		}, []int{3}, 1},
		{"huge length", func(t *testing.T, b []byte, f []int64) []byte {
			b[f[10]+4], b[f[10]+5], b[f[10]+6], b[f[10]+7] = 0xff, 0xff, 0xff, 0x7f
			return b
		}, []int{10}, 1},
		{"length pointing into the next record", func(t *testing.T, b []byte, f []int64) []byte {
			b[f[10]+4]++
			return b
		}, []int{10}, 1},
		{"two damaged regions", func(t *testing.T, b []byte, f []int64) []byte {
			b[f[2]+headerSize] ^= 1
			b[f[15]+headerSize+1] ^= 1
			return b
		}, []int{2, 15}, 2},
		{"adjacent damaged records", func(t *testing.T, b []byte, f []int64) []byte {
			b[f[4]+headerSize] ^= 1
			b[f[5]+headerSize] ^= 1
			return b
		}, []int{4, 5}, 1},
		{"truncated tail", func(t *testing.T, b []byte, f []int64) []byte {
			return b[:f[19]+20]
		}, []int{19}, 1},
		{"truncated inside a header", func(t *testing.T, b []byte, f []int64) []byte {
			return b[:f[19]+5]
		}, []int{19}, 1},
		{"zeroed tail after a crash", func(t *testing.T, b []byte, f []int64) []byte {
			return append(b, make([]byte, 4096)...)
		}, nil, 1},
		{"garbage at the start", func(t *testing.T, b []byte, f []int64) []byte {
			return append([]byte("garbage GGS1 more garbage"), b...)
		}, nil, 1},
		{"all garbage", func(t *testing.T, b []byte, f []int64) []byte {
			for i := range b {
				b[i] = byte(i * 7)
			}
			return b
		}, seq(0, 20), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, 1<<20)
			var frames []int64
			var off int64
			for i := range 20 {
				r := rec(i, 30)
				frames = append(frames, off)
				off += frameSize(&r)
				if err := s.Append(r); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			segs := segFiles(t, dir)
			if len(segs) != 1 {
				t.Fatalf("segment files = %v; want one", segs)
			}
			b, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(segs[0], tt.damage(t, b, frames), 0o600); err != nil {
				t.Fatal(err)
			}

			s = open(t, dir, 1<<20)
			defer s.Close()
			if st := s.Stats(); st.Corrupt != tt.corrupt {
				t.Errorf("after Open Stats().Corrupt = %d; want %d", st.Corrupt, tt.corrupt)
			}
			var want []string
			for i := range 20 {
				if !slices.Contains(tt.lost, i) {
					want = append(want, fmt.Sprintf("id-%06d", i))
				}
			}
			if recs, _ := s.Depth(); recs != int64(len(want)) {
				t.Errorf("Depth() records = %d; want %d", recs, len(want))
			}
			if got := ids(drain(t, s, false)); !slices.Equal(got, want) {
				t.Errorf("ids = %v; want %v", got, want)
			}
			// Reading over known damage does not count it again.
			s.Rewind()
			drain(t, s, true)
			if st := s.Stats(); st.Corrupt != tt.corrupt {
				t.Errorf("after reading Stats().Corrupt = %d; want %d", st.Corrupt, tt.corrupt)
			}
			// New records still go through.
			appendN(t, s, 100, 103, 0)
			if got, want := ids(drain(t, s, true)), wantIDs(100, 103); !slices.Equal(got, want) {
				t.Errorf("after damage new ids = %v; want %v", got, want)
			}
		})
	}
}

func TestDamageFoundWhileReading(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	defer s.Close()
	var frames []int64
	var off int64
	for i := range 10 {
		r := rec(i, 30)
		frames = append(frames, off)
		off += frameSize(&r)
		s.Append(r)
	}
	// Damage the open segment behind the spool's back.
	f, err := os.OpenFile(segFiles(t, dir)[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0}, frames[6]+headerSize+3)
	f.Close()
	want := slices.DeleteFunc(wantIDs(0, 10), func(id string) bool { return id == "id-000006" })
	if got := ids(drain(t, s, false)); !slices.Equal(got, want) {
		t.Errorf("ids = %v; want %v", got, want)
	}
	s.Rewind()
	drain(t, s, true)
	if st := s.Stats(); st.Corrupt != 1 {
		t.Errorf("Stats().Corrupt = %d; want 1", st.Corrupt)
	}
}

func TestDamagedCursor(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	appendN(t, s, 0, 10, 0)
	for range 4 {
		_, m, _ := s.Next()
		s.Ack(m)
	}
	s.Close()
	if err := os.WriteFile(filepath.Join(dir, cursorFile), []byte("not a cursor"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, 1<<20)
	defer s.Close()
	if got, want := ids(drain(t, s, true)), wantIDs(0, 10); !slices.Equal(got, want) {
		t.Errorf("with a damaged cursor ids = %v; want %v (delivered again, not lost)", got, want)
	}
}

func TestDepth(t *testing.T) {
	s := open(t, t.TempDir(), 1<<20)
	defer s.Close()
	var sizes []int64
	for i := range 5 {
		r := rec(i, i)
		sizes = append(sizes, frameSize(&r))
		s.Append(r)
	}
	sum := func(xs []int64) (t int64) {
		for _, x := range xs {
			t += x
		}
		return t
	}
	for acked := 0; acked <= 5; acked++ {
		recs, bytes := s.Depth()
		if recs != int64(5-acked) || bytes != sum(sizes[acked:]) {
			t.Errorf("after %d acks Depth() = %d, %d; want %d, %d", acked, recs, bytes, 5-acked, sum(sizes[acked:]))
		}
		if acked < 5 {
			_, m, _ := s.Next()
			s.Ack(m)
		}
	}
}

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segExt))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, p := range segFiles(t, dir) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// Every running process takes a slot of its own; a slot given back is
// taken again, with what it holds.
func TestOpenFree(t *testing.T) {
	root := t.TempDir()
	a, i, err := OpenFree(root, 2, 4096, nil)
	if err != nil || i != 0 {
		t.Fatalf("first OpenFree = slot %d, %v; want slot 0", i, err)
	}
	b, j, err := OpenFree(root, 2, 4096, nil)
	if err != nil || j != 1 {
		t.Fatalf("second OpenFree = slot %d, %v; want slot 1", j, err)
	}
	if _, _, err := OpenFree(root, 2, 4096, nil); err == nil || !strings.Contains(err.Error(), "all 2 slots are in use") {
		t.Errorf("third OpenFree = %v; want every slot in use", err)
	}
	appendN(t, a, 0, 3, 10)
	a.Close()
	c, k, err := OpenFree(root, 2, 4096, nil)
	if err != nil || k != 0 {
		t.Fatalf("OpenFree after a close = slot %d, %v; want slot 0 again", k, err)
	}
	if got := ids(drain(t, c, true)); !slices.Equal(got, wantIDs(0, 3)) {
		t.Errorf("slot 0 holds %v; want %v", got, wantIDs(0, 3))
	}
	b.Close()
	c.Close()
}
