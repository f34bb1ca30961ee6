package proxy

import (
	"testing"
	"time"
)

func TestNewUUIDv7(t *testing.T) {
	now := time.UnixMilli(1796000000123)
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		u := newUUIDv7(now)
		if u.Version() != 7 || u.Variant().String() != "RFC4122" {
			t.Fatalf("%s: version %d variant %v", u, u.Version(), u.Variant())
		}
		if sec, _ := u.Time().UnixTime(); sec != now.Unix() {
			t.Fatalf("%s encodes %d; want %d", u, sec, now.Unix())
		}
		if seen[u.String()] {
			t.Fatalf("duplicate %s", u)
		}
		seen[u.String()] = true
	}
}
