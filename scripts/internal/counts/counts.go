// Package counts prints the small count maps the drills log and report.
package counts

import (
	"fmt"
	"slices"
	"strings"
)

// Format prints m as "k=v" pairs in the order of their text, "a=1 b=2", or
// "-" when m is empty.
func Format[K comparable](m map[K]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%v=%d", k, v))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
