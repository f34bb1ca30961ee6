package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size units accepted after a byte count.
var sizeUnits = []struct {
	suffix string
	bytes  int64
}{
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// parseSize reads a byte count: decimal digits, optionally followed by one of
// B, KiB, MiB or GiB (`8MiB`, `256KiB`, `1048576`).
func parseSize(text string) (Size, error) {
	s := strings.TrimSpace(text)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.bytes
			break
		}
	}
	if strings.HasPrefix(s, "-") && len(s) > 1 && isDigits(s[1:]) {
		return 0, fmt.Errorf("size %q must not be negative", text)
	}
	if !isDigits(s) {
		return 0, fmt.Errorf("invalid size %q: want a whole number of bytes, optionally followed by B, KiB, MiB or GiB", text)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", text)
	}
	return Size(n * mult), nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String writes the size with the largest unit that divides it exactly
// (`8MiB`, `1500B`), in the syntax the configuration file accepts.
func (s Size) String() string {
	if s != 0 {
		for _, u := range sizeUnits {
			if int64(s)%u.bytes == 0 {
				return strconv.FormatInt(int64(s)/u.bytes, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}
