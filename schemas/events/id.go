package events

import (
	"math/rand/v2"
	"time"
)

// NewID returns a new event id: a version 7 UUID (RFC 9562) in canonical
// lowercase form, with the current Unix time in milliseconds in its first
// 48 bits and 74 random bits after the version and variant. Ids sort by
// time at millisecond granularity; ids of the same millisecond are in
// random order.
//
// An event id is the JetStream deduplication id (Nats-Msg-Id) and the row
// key in Postgres: it must be unique, not secret. So the random bits come
// from math/rand/v2, the runtime's per-thread ChaCha8 generator seeded
// from the operating system, rather than from crypto/rand (a system call
// or a locked generator per event). 74 random bits per millisecond make a
// collision among a million events in one millisecond about as likely as
// 1 in 4·10^10.
func NewID() string { return newID(time.Now()) }

// newID is NewID at time now.
func newID(now time.Time) string {
	ms := uint64(now.UnixMilli())
	a, b := rand.Uint64(), rand.Uint64()
	var u [16]byte
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | byte(a>>8)&0x0f // version 7, then 12 bits of rand_a
	u[7] = byte(a)
	u[8] = 0x80 | byte(b>>56)&0x3f // RFC 4122/9562 variant, then 62 bits of rand_b
	u[9], u[10], u[11], u[12], u[13], u[14], u[15] = byte(b>>48), byte(b>>40), byte(b>>32), byte(b>>24), byte(b>>16), byte(b>>8), byte(b)
	var s [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(s[:])
}
