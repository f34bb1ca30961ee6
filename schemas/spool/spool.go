// Package spool is an on-disk, bounded, crash-safe FIFO of encoded events:
// the buffer the gateway's event publisher and the analyzer's evaluation
// outbox fall back to while the event log does not store what they send,
// and drain, in order and with the original event ids, once it does — also
// after a restart.
//
// # Layout
//
// The directory holds append-only segment files (NNNNNNNNNNNNNNNN.seg, hex
// sequence numbers) of length- and CRC-framed records, a cursor file naming
// the oldest record not yet acknowledged, and a LOCK file held (flock) by
// the process that has the spool open. Records are appended to the newest
// segment; a segment is sealed when it reaches a sixteenth of the size
// bound, and removed once every record in it is acknowledged. When an
// Append would take the segment files past the bound, the oldest segments
// are removed first, and their unacknowledged records are counted as
// dropped (Stats).
//
// # Durability
//
// Append writes the record to the segment file with one write(2) before it
// returns, so a crash of the process loses nothing appended. The file is
// fsynced when a segment is sealed, on Close, and otherwise at most
// SyncInterval after an Append, so a crash of the machine (power loss,
// kernel panic) can lose the records appended in the last SyncInterval.
// The cursor is saved (written to a temporary file and renamed) at most
// SyncInterval after an Ack and on Close; a crash before that makes the
// reopened spool deliver again the records acknowledged since the last
// save. Delivery is therefore at least once: the receiver drops duplicates
// by record id (JetStream's duplicate window, idempotent inserts).
//
// A record whose bytes are damaged — a torn write at the end of a segment
// after a crash, or corruption anywhere — is skipped: the reader searches
// forward for the next valid frame, logs an error and counts the region in
// Stats.Corrupt. Damage never stops delivery of the records around it.
//
// # Concurrency
//
// A Spool is safe for concurrent use; Append may run in one goroutine while
// another reads with Next and Ack. There is one read position: the spool
// has a single reader.
package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// SyncInterval is the longest time an appended record or an
// acknowledgement stays unsynced to disk.
const SyncInterval = 200 * time.Millisecond

// maxSegBytes caps a segment, so that dropping the oldest one on a large
// spool does not throw away more than needed.
const maxSegBytes = 64 << 20

// Spool is an open spool directory. Open it with Open and close it with
// Close.
type Spool struct {
	dir      string
	maxBytes int64
	segBytes int64
	log      *slog.Logger
	lock     *os.File

	mu      sync.Mutex
	closed  bool
	segs    []*segment // oldest first
	w       *os.File   // the newest segment while it is appended to; nil after Open and after sealing
	wbuf    []byte
	nextSeq uint64
	total   int64 // bytes in segment files
	ack     Mark  // just after the last acknowledged record
	read    Mark  // just after the last record Next returned
	rw      window
	timer   *time.Timer
	dirty   bool // appended since the last fsync
	curDirt bool // acknowledged since the last cursor save
	stats   Stats
}

// Mark is the position just after a record returned by Next. Pass it to
// Ack once the record is delivered.
type Mark struct {
	seq   uint64
	off   int64
	n     int // valid records before off in segment seq
	kinds [MaxKinds]int
}

func (m Mark) before(o Mark) bool {
	return m.seq < o.seq || m.seq == o.seq && m.off < o.off
}

// Stats describes a spool's content and its losses since Open.
type Stats struct {
	// Records and Bytes are the records not yet acknowledged and their
	// size on disk.
	Records, Bytes int64
	// Segments is the number of segment files; DiskBytes their size.
	Segments  int
	DiskBytes int64
	// Dropped counts, by Record.Kind, the unacknowledged records removed
	// to keep the spool within its bound; DroppedBytes their size.
	Dropped      [MaxKinds]uint64
	DroppedBytes uint64
	// Corrupt counts damaged regions skipped (each may have held several
	// records); CorruptBytes their size.
	Corrupt      uint64
	CorruptBytes uint64
}

// MinBytes is the smallest size bound Open accepts (a spool of one
// record with a one-byte subject and id and no data).
const MinBytes = headerSize + minBody + 2

// Open opens the spool in dir, creating the directory when missing, and
// resumes after the last acknowledged record. maxBytes bounds the size of
// the segment files. It reads every segment once, to count records and find
// damage, so it takes time proportional to what is spooled. A nil log
// discards messages. The caller must Close the spool.
func Open(dir string, maxBytes int64, log *slog.Logger) (*Spool, error) {
	if maxBytes < MinBytes {
		return nil, fmt.Errorf("open spool %s: size bound %d bytes is too small", dir, maxBytes)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open spool %s: %w", dir, err)
	}
	s := &Spool{
		dir:      dir,
		maxBytes: maxBytes,
		segBytes: max(min(maxBytes/16, maxSegBytes), 1),
		log:      log.With("spool", dir),
		lock:     lock,
	}
	if err := s.load(); err != nil {
		s.rw.close()
		unlockDir(lock)
		return nil, fmt.Errorf("open spool %s: %w", dir, err)
	}
	if st := s.statsLocked(); st.Records > 0 || st.Corrupt > 0 {
		s.log.Info("spool reopened", "records", st.Records, "bytes", st.Bytes, "segments", st.Segments, "corrupt_regions", st.Corrupt)
	}
	return s, nil
}

// load reads the directory: the cursor, then every segment after it.
func (s *Spool) load() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var seqs []uint64
	for _, e := range entries {
		if seq, ok := parseSegName(e.Name()); ok && e.Type().IsRegular() {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	cur, haveCur := s.readCursor()
	s.nextSeq = cur.seq + 1
	for _, seq := range seqs {
		s.nextSeq = max(s.nextSeq, seq+1)
		path := segPath(s.dir, seq)
		if haveCur && seq < cur.seq {
			// Acknowledged before the last run ended; its removal was lost.
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		g := &segment{seq: seq, size: fi.Size()}
		var visit func(int64, uint8)
		if haveCur && seq == cur.seq {
			s.ack = Mark{seq: seq}
			visit = func(end int64, kind uint8) {
				if end <= cur.off {
					s.ack.off, s.ack.n = end, s.ack.n+1
					s.ack.kinds[kind]++
				}
			}
		}
		if err := s.rw.open(s.dir, seq); err != nil {
			return err
		}
		if err := s.rw.scan(g, visit); err != nil {
			return err
		}
		for _, b := range g.bad {
			s.corrupt(g, b, "damaged records skipped")
		}
		s.segs = append(s.segs, g)
		s.total += g.size
	}
	s.rw.close()
	if len(s.segs) > 0 && s.ack.seq != s.segs[0].seq {
		// No cursor, or its segment is gone: start at the oldest segment.
		s.ack = Mark{seq: s.segs[0].seq}
	}
	s.read = s.ack
	for s.total > s.maxBytes && len(s.segs) > 0 {
		if err := s.dropOldest(); err != nil {
			return err
		}
	}
	s.release()
	return nil
}

// corrupt logs and counts a damaged region of g.
func (s *Spool) corrupt(g *segment, b span, msg string) {
	s.stats.Corrupt++
	s.stats.CorruptBytes += uint64(b.to - b.from)
	s.log.Error(msg, "segment", segName(g.seq), "offset", b.from, "bytes", b.to-b.from)
}

// Append adds r at the end of the spool. It returns once r is written to
// the segment file (not yet fsynced: see the package documentation). When
// the spool is full it first removes the oldest segments, counting their
// unacknowledged records as dropped. It returns ErrTooLarge when r alone
// exceeds the bound, and ErrBadRecord when r cannot be encoded.
func (s *Spool) Append(r Record) error {
	if err := validate(&r); err != nil {
		return err
	}
	n := frameSize(&r)
	if n > s.maxBytes || n > MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes, bound %d", ErrTooLarge, n, min(s.maxBytes, MaxRecordBytes))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.w != nil {
		if g := s.segs[len(s.segs)-1]; g.size > 0 && g.size+n > s.segBytes {
			if err := s.seal(); err != nil {
				return err
			}
		}
	}
	// Make room. The segment being appended to is never removed here: it
	// holds at most segBytes ≤ maxBytes including r.
	for s.total+n > s.maxBytes && len(s.segs) > 0 && (s.w == nil || len(s.segs) > 1) {
		if err := s.dropOldest(); err != nil {
			return err
		}
	}
	if s.w == nil {
		if err := s.create(); err != nil {
			return err
		}
	}
	g := s.segs[len(s.segs)-1]
	s.wbuf = appendFrame(s.wbuf[:0], &r)
	if _, err := s.w.Write(s.wbuf); err != nil {
		// Cut a partial frame so the next one starts on a boundary; the
		// reader would skip it anyway.
		if terr := s.w.Truncate(g.size); terr != nil {
			s.log.Error("cut partial record", "segment", segName(g.seq), "err", terr)
		}
		if s.rw.seq == g.seq {
			s.rw.n = 0 // it may hold the partial bytes
		}
		return fmt.Errorf("append to spool: %w", err)
	}
	g.size += n
	g.records++
	g.kinds[r.Kind]++
	s.total += n
	s.dirty = true
	s.schedule()
	return nil
}

// create starts a new segment for appending.
func (s *Spool) create() error {
	seq := s.nextSeq
	f, err := os.OpenFile(segPath(s.dir, seq), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("create spool segment: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("create spool segment: %w", err)
	}
	s.nextSeq++
	s.w = f
	s.segs = append(s.segs, &segment{seq: seq})
	if len(s.segs) == 1 {
		s.ack, s.read = Mark{seq: seq}, Mark{seq: seq}
	}
	return nil
}

// seal syncs and closes the segment being appended to.
func (s *Spool) seal() error {
	err := s.w.Sync()
	if cerr := s.w.Close(); err == nil {
		err = cerr
	}
	s.w, s.dirty = nil, false
	if err != nil {
		return fmt.Errorf("seal spool segment: %w", err)
	}
	return nil
}

// dropOldest removes the oldest segment, counting what it held that was
// not acknowledged.
func (s *Spool) dropOldest() error {
	g := s.segs[0]
	if s.w != nil && len(s.segs) == 1 {
		if err := s.seal(); err != nil {
			return err
		}
	}
	recs, kinds, size := g.records, g.kinds, g.size
	if s.ack.seq == g.seq {
		recs -= s.ack.n
		size -= s.ack.off
		for k := range kinds {
			kinds[k] -= s.ack.kinds[k]
		}
	}
	if err := s.removeHead(); err != nil {
		return err
	}
	for k, c := range kinds {
		s.stats.Dropped[k] += uint64(max(c, 0))
	}
	s.stats.DroppedBytes += uint64(max(size, 0))
	s.log.Warn("spool full: dropped oldest records", "segment", segName(g.seq), "records", recs, "bytes", size)
	return nil
}

// removeHead deletes the oldest segment and moves the positions in it to
// the start of the next one.
func (s *Spool) removeHead() error {
	g := s.segs[0]
	if s.rw.seq == g.seq {
		s.rw.close()
	}
	if err := os.Remove(segPath(s.dir, g.seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove spool segment: %w", err)
	}
	s.segs = s.segs[1:]
	s.total -= g.size
	head := Mark{}
	if len(s.segs) > 0 {
		head = Mark{seq: s.segs[0].seq}
	}
	if s.ack.seq <= g.seq {
		s.ack = head
		s.curDirt = true
		s.schedule()
	}
	if s.read.seq <= g.seq {
		s.read = head
	}
	return nil
}

// release removes the segments whose records are all acknowledged.
func (s *Spool) release() {
	for len(s.segs) > 0 {
		g := s.segs[0]
		if s.ack.seq < g.seq || s.ack.seq == g.seq && g.skipBad(s.ack.off) < g.size {
			return
		}
		if s.w != nil && len(s.segs) == 1 {
			if err := s.seal(); err != nil {
				s.log.Error("close emptied spool segment", "err", err)
			}
		}
		if err := s.removeHead(); err != nil {
			s.log.Error("remove delivered spool segment", "err", err)
			return
		}
	}
}

// Next returns the oldest record after those already returned since Open or
// the last Rewind, and the Mark to acknowledge it with. It returns ErrEmpty
// when no record is waiting. The record's fields are the caller's.
func (s *Spool) Next() (Record, Mark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Record{}, Mark{}, ErrClosed
	}
	for {
		i := s.find(s.read.seq)
		if i < 0 {
			if len(s.segs) == 0 {
				return Record{}, Mark{}, ErrEmpty
			}
			s.read = Mark{seq: s.segs[0].seq}
			continue
		}
		g := s.segs[i]
		s.read.off = g.skipBad(s.read.off)
		if s.read.off >= g.size {
			if i+1 == len(s.segs) {
				return Record{}, Mark{}, ErrEmpty
			}
			s.read = Mark{seq: s.segs[i+1].seq}
			continue
		}
		if err := s.rw.open(s.dir, g.seq); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// Removed behind our back: count what it held as damage.
				s.corrupt(g, span{s.read.off, g.size}, "spool segment missing")
				g.addBad(span{s.read.off, g.size})
				continue
			}
			return Record{}, Mark{}, fmt.Errorf("read spool: %w", err)
		}
		f, err := s.rw.frame(s.read.off, g.size)
		if errors.Is(err, errShort) || errors.Is(err, errCorrupt) {
			next, rerr := s.rw.resync(s.read.off+1, g.size)
			if rerr != nil {
				return Record{}, Mark{}, fmt.Errorf("read spool: %w", rerr)
			}
			b := span{s.read.off, next}
			s.corrupt(g, b, "damaged records skipped")
			g.addBad(b)
			continue
		}
		if err != nil {
			return Record{}, Mark{}, fmt.Errorf("read spool: %w", err)
		}
		rec := Record{Kind: f.kind, Subject: string(f.subject), ID: string(f.id), Data: append([]byte(nil), f.data...)}
		s.read.off += int64(f.n)
		s.read.n++
		s.read.kinds[f.kind]++
		return rec, s.read, nil
	}
}

func (s *Spool) find(seq uint64) int {
	for i, g := range s.segs {
		if g.seq == seq {
			return i
		}
	}
	return -1
}

// Ack acknowledges every record up to and including the one m was returned
// with: they will not be returned again, also after a reopen (but see the
// package documentation on crashes). Acknowledging an older mark than a
// previous Ack, or a mark of records since dropped, does nothing.
func (s *Spool) Ack(m Mark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.ack.before(m) || s.find(m.seq) < 0 {
		return nil
	}
	s.ack = m
	if s.read.before(m) {
		s.read = m
	}
	s.curDirt = true
	s.schedule()
	s.release()
	return nil
}

// Rewind makes Next return again every record not yet acknowledged, from
// the oldest.
func (s *Spool) Rewind() {
	s.mu.Lock()
	s.read = s.ack
	s.mu.Unlock()
}

// Depth returns the number of records not yet acknowledged and their size
// in bytes.
func (s *Spool) Depth() (records, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.statsLocked()
	return st.Records, st.Bytes
}

// Stats returns the spool's content and losses.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked()
}

func (s *Spool) statsLocked() Stats {
	st := s.stats
	st.Segments = len(s.segs)
	st.DiskBytes = s.total
	for _, g := range s.segs {
		st.Records += int64(g.records)
	}
	st.Bytes = s.total
	if len(s.segs) > 0 && s.ack.seq == s.segs[0].seq {
		st.Records -= int64(s.ack.n)
		st.Bytes -= s.ack.off
	}
	st.Records = max(st.Records, 0)
	return st
}

// Sync writes appended records and the cursor to stable storage now.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.syncLocked()
}

func (s *Spool) schedule() {
	if s.timer == nil && !s.closed {
		s.timer = time.AfterFunc(SyncInterval, s.background)
	}
}

func (s *Spool) background() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = nil
	if s.closed {
		return
	}
	if err := s.syncLocked(); err != nil {
		s.log.Error("sync spool", "err", err)
	}
}

func (s *Spool) syncLocked() error {
	if s.dirty && s.w != nil {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("sync spool segment: %w", err)
		}
		s.dirty = false
	}
	if s.curDirt {
		if err := s.writeCursor(); err != nil {
			return err
		}
		s.curDirt = false
	}
	return nil
}

// Close syncs the spool and releases the directory. Records not yet
// acknowledged stay for the next Open.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	err := s.syncLocked()
	if s.w != nil {
		if cerr := s.w.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close spool segment: %w", cerr)
		}
		s.w = nil
	}
	s.rw.close()
	s.closed = true
	if uerr := unlockDir(s.lock); err == nil {
		err = uerr
	}
	return err
}
