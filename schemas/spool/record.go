package spool

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Record is one encoded event waiting for delivery.
type Record struct {
	// Kind is a caller-defined class below MaxKinds, kept so that records
	// dropped to make room can be reported by class.
	Kind uint8
	// Subject is the NATS subject the record is published to.
	Subject string
	// ID is the event id, republished as the message id so that the
	// receiver can drop duplicates.
	ID string
	// Data is the encoded event.
	Data []byte
}

// On disk a record is a frame:
//
//	magic   4 bytes  "GGS1"
//	length  uint32   little endian, length of body
//	crc     uint32   little endian, CRC-32C of body
//	body:
//	  kind        uint8
//	  subject len uint16 little endian, then the subject
//	  id len      uint8, then the id
//	  data        the rest of the body
//
// The magic lets a reader find the next frame after a corrupt one; the CRC
// tells a frame from bytes that happen to contain the magic.
const (
	headerSize = 12
	// MaxKinds bounds Record.Kind.
	MaxKinds = 8
	// MaxRecordBytes bounds a frame, so that a corrupt length can never
	// make a reader allocate more.
	MaxRecordBytes = 64 << 20
	maxSubject     = 1<<16 - 1
	maxID          = 1<<8 - 1
	minBody        = 1 + 2 + 1
)

var (
	magic      = [4]byte{'G', 'G', 'S', '1'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// frameSize is the number of bytes r takes on disk.
func frameSize(r *Record) int64 {
	return headerSize + minBody + int64(len(r.Subject)) + int64(len(r.ID)) + int64(len(r.Data))
}

func validate(r *Record) error {
	switch {
	case r.Kind >= MaxKinds:
		return fmt.Errorf("%w: kind %d not below %d", ErrBadRecord, r.Kind, MaxKinds)
	case r.Subject == "" || len(r.Subject) > maxSubject:
		return fmt.Errorf("%w: subject of %d bytes", ErrBadRecord, len(r.Subject))
	case r.ID == "" || len(r.ID) > maxID:
		return fmt.Errorf("%w: id of %d bytes", ErrBadRecord, len(r.ID))
	}
	return nil
}

// appendFrame appends r's frame to dst.
func appendFrame(dst []byte, r *Record) []byte {
	start := len(dst)
	body := minBody + len(r.Subject) + len(r.ID) + len(r.Data)
	dst = append(dst, magic[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(body))
	dst = append(dst, 0, 0, 0, 0) // crc, filled below
	b := len(dst)
	dst = append(dst, r.Kind)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Subject)))
	dst = append(dst, r.Subject...)
	dst = append(dst, uint8(len(r.ID)))
	dst = append(dst, r.ID...)
	dst = append(dst, r.Data...)
	binary.LittleEndian.PutUint32(dst[start+8:], crc32.Checksum(dst[b:], castagnoli))
	return dst
}

// frameLen reads the header at the start of b and returns the length of the
// whole frame. It returns errShort when b holds less than a header, and
// errCorrupt when the header cannot start a frame.
func frameLen(b []byte) (int, error) {
	if len(b) < headerSize {
		return 0, errShort
	}
	if !bytes.Equal(b[:4], magic[:]) {
		return 0, errCorrupt
	}
	n := binary.LittleEndian.Uint32(b[4:8])
	if n < minBody || n > MaxRecordBytes-headerSize {
		return 0, errCorrupt
	}
	return headerSize + int(n), nil
}

// decodeFrame decodes the frame at the start of b. The record's Data
// aliases b; Subject and ID are copies. It returns the frame's length,
// errShort when b ends inside the frame, and errCorrupt when the bytes are
// not a valid frame.
func decodeFrame(b []byte) (Record, int, error) {
	f, err := parseFrame(b)
	if err != nil {
		return Record{}, 0, err
	}
	return Record{Kind: f.kind, Subject: string(f.subject), ID: string(f.id), Data: f.data}, f.n, nil
}

// frame is a parsed frame whose fields alias the bytes it was parsed from.
type frame struct {
	kind              uint8
	subject, id, data []byte
	n                 int
}

func parseFrame(b []byte) (frame, error) {
	n, err := frameLen(b)
	if err != nil {
		return frame{}, err
	}
	if len(b) < n {
		return frame{}, errShort
	}
	body := b[headerSize:n]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[8:12]) {
		return frame{}, errCorrupt
	}
	kind := body[0]
	sl := int(binary.LittleEndian.Uint16(body[1:3]))
	if kind >= MaxKinds || sl == 0 || 3+sl+1 > len(body) {
		return frame{}, errCorrupt
	}
	rest := body[3+sl:]
	il := int(rest[0])
	if il == 0 || 1+il > len(rest) {
		return frame{}, errCorrupt
	}
	return frame{kind: kind, subject: body[3 : 3+sl], id: rest[1 : 1+il], data: rest[1+il:], n: n}, nil
}
