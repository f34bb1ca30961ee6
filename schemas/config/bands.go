package config

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/graygate/graygate/schemas/events"
)

// namePattern is what deployment and band names are made of: they become NATS
// subject tokens and metric labels.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

const contextPath = "routing.signals.context"

// span is a band's token range with an open end as math.MaxInt64.
type span struct {
	name   string
	lo, hi int64
}

// validateBands checks the band rules of SPEC §5.1 and warns about gaps,
// partial overlaps and several open-ended bands. It returns the set of
// defined band names, for the candidates' `context` references.
// MaxContextBands is the most bands routing.signals.context holds (the
// gateway matches them as one 64-bit set).
const MaxContextBands = 64

func (d *decoder) validateBands(bands []ContextBand) map[string]bool {
	names := map[string]bool{}
	first := map[string]int{}
	var spans []span
	open := []string{}
	for i, b := range bands {
		p := indexPath(contextPath, i)
		ok := true
		switch {
		case d.failed[p+".name"]:
			ok = false
		case b.Name == "":
			d.errorf(p+".name", nil, "a band needs a name")
			ok = false
		case !namePattern.MatchString(b.Name):
			d.errorf(p+".name", nil, "invalid band name %q: use letters, digits, _ and -", b.Name)
			ok = false
		case len(b.Name) > events.MaxBandLen:
			// Statistics carry the band (SPEC §7 rev. 4): a name their
			// rules refuse would cost the deployment its statistics.
			d.errorf(p+".name", nil, "band name is longer than %d bytes", events.MaxBandLen)
			ok = false
		default:
			if j, dup := first[b.Name]; dup {
				d.errorf(p+".name", nil, "duplicate band name %q (also %s)", b.Name, indexPath(contextPath, j))
				ok = false
			} else {
				first[b.Name] = i
			}
			names[b.Name] = true
		}
		if d.failed[p+".min_tokens"] || d.failed[p+".max_tokens"] {
			continue // already reported; the band's range is unknown
		}
		if !b.MinTokens.Set && !b.MaxTokens.Set {
			d.errorf(p, nil, "a band needs min_tokens, max_tokens or both")
			continue
		}
		if b.MinTokens.Set && b.MaxTokens.Set && b.MinTokens.Value > b.MaxTokens.Value {
			d.errorf(p, nil, "min_tokens %d is greater than max_tokens %d", b.MinTokens.Value, b.MaxTokens.Value)
			continue
		}
		if !ok {
			continue
		}
		s := span{name: b.Name, lo: b.MinTokens.Value, hi: math.MaxInt64}
		if b.MaxTokens.Set {
			s.hi = b.MaxTokens.Value
		} else {
			open = append(open, b.Name)
		}
		spans = append(spans, s)
	}
	d.bandWarnings(spans, open)
	return names
}

// bandWarnings reports what makes the bands probably not what was meant:
// token ranges that no band matches between two bands, pairs of bands that
// overlap without one containing the other, and more than one open end.
func (d *decoder) bandWarnings(spans []span, open []string) {
	if len(open) > 1 {
		d.warnf(contextPath, nil, "more than one open-ended band (%s): every large estimate matches all of them", strings.Join(open, ", "))
	}
	if len(spans) == 0 {
		return
	}
	byStart := append([]span(nil), spans...)
	sort.SliceStable(byStart, func(i, j int) bool { return byStart[i].lo < byStart[j].lo })
	reach := byStart[0]
	for _, s := range byStart[1:] {
		if reach.hi == math.MaxInt64 {
			break
		}
		if s.lo > reach.hi+1 {
			d.warnf(contextPath, nil, "gap between %s (ends at %d) and %s (starts at %d): estimates %s match no band",
				reach.name, reach.hi, s.name, s.lo, tokenRange(reach.hi+1, s.lo-1))
		}
		if s.hi > reach.hi {
			reach = s
		}
	}
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			lo, hi := max(a.lo, b.lo), min(a.hi, b.hi)
			nested := (a.lo <= b.lo && b.hi <= a.hi) || (b.lo <= a.lo && a.hi <= b.hi)
			if lo <= hi && !nested {
				d.warnf(contextPath, nil, "partial overlap: %s and %s both match %s", a.name, b.name, tokenRange(lo, hi))
			}
		}
	}
}

func tokenRange(lo, hi int64) string {
	if lo == hi {
		return strconv.FormatInt(lo, 10)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}
