package rollout

import "math/rand/v2"

// Arm is the upstream a request goes to.
type Arm uint8

// Arms.
const (
	Primary Arm = iota
	Gray
)

// Force is what the force header asked for.
type Force uint8

// Force values: none, "true" (gray), "false" (primary).
const (
	NoForce Force = iota
	ForceGray
	ForcePrimary
)

// ParseForce reads a force header value: "true" or "false", any case.
func ParseForce(v []byte) Force {
	switch {
	case len(v) == 4 && (v[0]|0x20) == 't' && (v[1]|0x20) == 'r' && (v[2]|0x20) == 'u' && (v[3]|0x20) == 'e':
		return ForceGray
	case len(v) == 5 && (v[0]|0x20) == 'f' && (v[1]|0x20) == 'a' && (v[2]|0x20) == 'l' && (v[3]|0x20) == 's' && (v[4]|0x20) == 'e':
		return ForcePrimary
	}
	return NoForce
}

// Assign picks the arm for a request (SPEC §6.1): an unknown,
// rolled-back or unwatched (SPEC §11 rev. 4) state serves primary whatever the headers say; then the
// force header, which the caller passes only for a request that carries a
// force token, and which counts in testing or at a percentage above 0;
// testing and 0 % serve primary; then the sticky value's bucket against
// the percentage, so the same value always lands on the same arm of a
// deployment and raising the percentage only moves values from primary
// to gray. Without a sticky value the draw is random.
func Assign(s *State, force Force, sticky []byte) Arm {
	if s == nil || !s.Known || s.Status == RolledBack || s.Unwatched {
		return Primary
	}
	if force != NoForce && s.MayForce() {
		if force == ForceGray {
			return Gray
		}
		return Primary
	}
	if s.Status != Active || s.Basis <= 0 {
		return Primary
	}
	var bucket uint32
	if len(sticky) == 0 {
		bucket = rand.Uint32N(10000)
	} else {
		bucket = Bucket(s.Deployment, sticky)
	}
	if int32(bucket) < s.Basis {
		return Gray
	}
	return Primary
}

// Bucket maps a sticky value to one of 10000 buckets of a deployment:
// FNV-1a (64-bit) over the deployment name, a separator and the value,
// then a full avalanche (murmur3's fmix64), so the same value falls in
// unrelated buckets of different deployments — the gray cohort of one
// deployment says nothing about another's.
func Bucket(deployment string, sticky []byte) uint32 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(deployment); i++ {
		h ^= uint64(deployment[i])
		h *= prime
	}
	h ^= 0xff // never a byte of a deployment name
	h *= prime
	for _, c := range sticky {
		h ^= uint64(c)
		h *= prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return uint32(h % 10000)
}
