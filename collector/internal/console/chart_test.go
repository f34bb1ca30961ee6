package console

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPlaceLabels crowds a chart with rollout events — a burst of
// promotions and operator changes, a rollback among them, events at both
// edges — and checks that the labels drawn never overlap or leave the
// chart, that the rollback's label is drawn, and that every marker keeps
// its label in its tooltip.
func TestPlaceLabels(t *testing.T) {
	from := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	to := from.Add(time.Hour)
	var ms []Marker
	for i := range 12 {
		ms = append(ms, Marker{T: from.Add(time.Duration(20+i) * time.Minute), Class: "mk-promotion", Label: fmt.Sprintf("promotion to %d %%", i+1)})
	}
	ms = append(ms,
		Marker{T: from.Add(26 * time.Minute), Class: "mk-rollback", Label: "rollback: schema_failure_rate estimate 0.082, bound 0.062 vs 0.05"},
		Marker{T: from, Class: "mk-config", Label: "config: active 5 %"},
		Marker{T: to, Class: "mk-operator", Label: "admin (alice): active 20 % — widening after a long review of the numbers"})
	for _, w := range []bool{false, true} {
		c := Chart{ID: "p", From: from, To: to, Markers: ms, LabelMarkers: true, Small: w,
			Series: []Series{{Name: "pct", Points: []Point{{T: from, V: 5}, {T: to, V: 20}}}}}.layout()
		type box struct {
			lo, hi, y float64
			label     string
		}
		var drawn []box
		rollback := false
		for _, m := range c.Markers {
			if !strings.Contains(m.Title, "—") {
				t.Errorf("marker %q has no tooltip label", m.Title)
			}
			if m.Label == "" {
				continue
			}
			width := float64(len([]rune(m.Label))) * charWidth
			b := box{m.X, m.X + width, m.LabelY, m.Label}
			if m.Anchor == "end" {
				b.lo, b.hi = m.X-width, m.X
			}
			if b.lo < 0 || b.hi > float64(c.W) {
				t.Errorf("width %d: label %q spans [%.0f, %.0f], outside the chart", c.W, m.Label, b.lo, b.hi)
			}
			for _, o := range drawn {
				if o.y == b.y && b.lo < o.hi && o.lo < b.hi {
					t.Errorf("width %d: labels %q and %q overlap in row %.0f", c.W, o.label, b.label, b.y)
				}
			}
			drawn = append(drawn, b)
			rollback = rollback || strings.HasPrefix(m.Label, "rollback")
		}
		if !rollback {
			t.Errorf("width %d: the rollback's label is not drawn", c.W)
		}
		if len(drawn) < 4 {
			t.Errorf("width %d: only %d labels drawn; want the room used", c.W, len(drawn))
		}
	}
}
