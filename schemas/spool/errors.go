package spool

import "errors"

var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("spool closed")
	// ErrTooLarge is returned by Append for a record whose frame is larger
	// than the spool's size bound or than MaxRecordBytes.
	ErrTooLarge = errors.New("record larger than the spool can hold")
	// ErrBadRecord is returned by Append for a record the format cannot
	// hold: a kind of MaxKinds or more, an empty or over-long subject or id.
	ErrBadRecord = errors.New("record not representable")
	// ErrLocked is returned by Open when another process holds the spool
	// directory.
	ErrLocked = errors.New("spool directory in use by another process")

	// errShort means the bytes end inside a frame: a truncated record.
	errShort = errors.New("truncated record")
	// errCorrupt means the bytes at an offset are not a valid frame.
	errCorrupt = errors.New("corrupt record")
)

// ErrEmpty is returned by Next when no record is waiting.
var ErrEmpty = errors.New("spool empty")
