package spool

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// The cursor file holds the position of the oldest unacknowledged record:
//
//	magic "GGC1" | segment uint64 | offset uint64 | CRC-32C of the preceding 20 bytes
//
// all little endian. A missing or damaged cursor makes Open start at the
// oldest segment: records are delivered again, never lost.
const (
	cursorFile = "cursor"
	cursorSize = 24
)

var cursorMagic = [4]byte{'G', 'G', 'C', '1'}

type cursor struct {
	seq uint64
	off int64
}

func (s *Spool) readCursor() (cursor, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, cursorFile))
	if err != nil {
		if !os.IsNotExist(err) {
			s.log.Error("read spool cursor; starting at the oldest record", "err", err)
		}
		return cursor{}, false
	}
	c, ok := decodeCursor(b)
	if !ok {
		s.log.Error("damaged spool cursor; starting at the oldest record")
	}
	return c, ok
}

func decodeCursor(b []byte) (cursor, bool) {
	if len(b) != cursorSize || !bytes.Equal(b[:4], cursorMagic[:]) ||
		crc32.Checksum(b[:20], castagnoli) != binary.LittleEndian.Uint32(b[20:]) {
		return cursor{}, false
	}
	off := binary.LittleEndian.Uint64(b[12:20])
	if off > 1<<62 {
		return cursor{}, false
	}
	return cursor{seq: binary.LittleEndian.Uint64(b[4:12]), off: int64(off)}, true
}

func encodeCursor(c cursor) []byte {
	b := make([]byte, 0, cursorSize)
	b = append(b, cursorMagic[:]...)
	b = binary.LittleEndian.AppendUint64(b, c.seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.off))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// writeCursor saves the acknowledged position: a new file renamed over the
// old one, so a crash leaves either.
func (s *Spool) writeCursor() error {
	tmp := filepath.Join(s.dir, cursorFile+".tmp")
	if err := os.WriteFile(tmp, encodeCursor(cursor{s.ack.seq, s.ack.off}), 0o600); err != nil {
		return fmt.Errorf("save spool cursor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, cursorFile)); err != nil {
		return fmt.Errorf("save spool cursor: %w", err)
	}
	return nil
}

// syncDir makes the creation or removal of a file in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
