package console

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/schemas/axis"
	"github.com/graygate/graygate/schemas/text"
)

// Point is one value of a series at a time. A point that stands for
// several (aggregated older data) has N > 1, V their mean, and Lo and Hi
// their extremes; Fail marks a point where a gate failed.
type Point struct {
	T      time.Time
	V      float64
	N      int
	Lo, Hi float64
	Fail   bool
}

// Series is one line of a chart. Class picks its colour in console.css;
// Step draws a step function (the percentage), Dots a circle per point,
// Dashed a dashed line (thresholds).
type Series struct {
	Name   string
	Class  string
	Points []Point
	Step   bool
	Dots   bool
	Dashed bool
}

// Marker is a moment marked across a chart: a rollout event.
type Marker struct {
	T     time.Time
	Label string
	Class string
}

// Chart is a time chart before it is laid out.
type Chart struct {
	ID, Title, Unit string
	From, To        time.Time
	Series          []Series
	Markers         []Marker
	// LabelMarkers writes each marker's label on the chart (else only in
	// its tooltip).
	LabelMarkers bool
	// ZeroBased makes the y axis include 0.
	ZeroBased bool
	// Small draws the chart for half the page's width (its text stays
	// readable when two charts share a row).
	Small bool
	Note  string
}

// Downsample returns pts (oldest first) with at most max points: when
// there are more, the newest max/2 are kept as they are and the older ones
// are merged, in time order, into max−max/2 groups of consecutive points
// of (nearly) equal size. A merged point has the time of its newest
// member, the mean of their values weighted by their N, their minimum and
// maximum, the sum of their N, and Fail when any member failed — so a
// failing evaluation never disappears into a mean.
func Downsample(pts []Point, max int) []Point {
	if max < 2 || len(pts) <= max {
		return pts
	}
	keep := max / 2
	old, recent := pts[:len(pts)-keep], pts[len(pts)-keep:]
	groups := max - keep
	out := make([]Point, 0, max)
	for g := range groups {
		lo, hi := g*len(old)/groups, (g+1)*len(old)/groups
		if lo == hi {
			continue
		}
		out = append(out, merge(old[lo:hi]))
	}
	return append(out, recent...)
}

func merge(pts []Point) Point {
	m := Point{T: pts[len(pts)-1].T, Lo: math.Inf(1), Hi: math.Inf(-1)}
	var sum float64
	for _, p := range pts {
		n := max(p.N, 1)
		m.N += n
		sum += p.V * float64(n)
		lo, hi := p.Lo, p.Hi
		if p.N <= 1 {
			lo, hi = p.V, p.V
		}
		m.Lo, m.Hi = math.Min(m.Lo, lo), math.Max(m.Hi, hi)
		m.Fail = m.Fail || p.Fail
	}
	m.V = sum / float64(m.N)
	return m
}

// Layout constants of every chart, in SVG user units (the SVG scales to
// the page's width).
const (
	chartW      = 960
	smallW      = 600
	chartH      = 240
	padLeft     = 64
	padRight    = 16
	padTop      = 16
	padBottom   = 28
	markerLabel = 13 // line height of marker labels
)

// svgChart is a laid-out chart, what templates/chart.html draws.
type svgChart struct {
	ID, Title, Unit, Note string
	W, H                  int
	X0, X1, Y0, Y1        float64 // the plot area
	XTicks, YTicks        []tick
	Lines                 []svgLine
	Dots                  []svgDot
	Markers               []svgMarker
	Legend                []legendItem
	Empty                 bool
	Points                int // points drawn, over every series
}

type tick struct {
	Pos   float64
	Label string
}

type svgLine struct {
	Class  string
	D      string
	Dashed bool
}

type svgDot struct {
	Class  string
	X, Y   float64
	R      float64
	Title  string
	Series string
}

type svgMarker struct {
	Class  string
	X      float64
	LabelY float64
	Label  string
	Title  string
	Anchor string
}

type legendItem struct{ Name, Class string }

// layout scales c into the plot area. Every series is downsampled to
// MaxPoints first.
func (c Chart) layout() svgChart {
	out := svgChart{ID: c.ID, Title: c.Title, Unit: c.Unit, Note: c.Note, W: chartW, H: chartH}
	if c.Small {
		out.W = smallW
	}
	top := float64(padTop)
	if c.LabelMarkers && len(c.Markers) > 0 {
		top += 3 * markerLabel
	}
	out.X0, out.X1, out.Y0, out.Y1 = padLeft, float64(out.W-padRight), top, chartH-padBottom
	from, to := c.From, c.To
	if !to.After(from) {
		to = from.Add(time.Minute)
	}
	ymin, ymax := math.Inf(1), math.Inf(-1)
	series := make([]Series, len(c.Series))
	for i, s := range c.Series {
		s.Points = Downsample(s.Points, MaxPoints)
		series[i] = s
		for _, p := range s.Points {
			if finite(p.V) {
				ymin, ymax = math.Min(ymin, p.V), math.Max(ymax, p.V)
			}
		}
	}
	if math.IsInf(ymin, 1) {
		out.Empty = true
		ymin, ymax = 0, 1
	}
	if c.ZeroBased {
		ymin, ymax = math.Min(ymin, 0), math.Max(ymax, 0)
	}
	if ymax-ymin < 1e-12 {
		pad := math.Max(math.Abs(ymax)*0.1, 1e-3)
		ymin, ymax = ymin-pad, ymax+pad
		if c.ZeroBased && ymin < 0 && ymax > 0 && ymin+pad >= 0 {
			ymin = 0
		}
	}
	step := axis.NiceStep((ymax - ymin) / 4)
	ymin, ymax = math.Floor(ymin/step)*step, math.Ceil(ymax/step)*step
	x := func(t time.Time) float64 {
		f := float64(t.Sub(from)) / float64(to.Sub(from))
		return round1(out.X0 + f*(out.X1-out.X0))
	}
	y := func(v float64) float64 {
		return round1(out.Y1 - (v-ymin)/(ymax-ymin)*(out.Y1-out.Y0))
	}
	for v := ymin; v <= ymax+step/2; v += step {
		out.YTicks = append(out.YTicks, tick{Pos: y(v), Label: num(roundTo(v, step))})
	}
	out.XTicks = timeTicks(from, to, x)
	for _, s := range series {
		out.Legend = append(out.Legend, legendItem{Name: s.Name, Class: s.Class})
		var d strings.Builder
		pen := false
		var lastY float64
		for _, p := range s.Points {
			if !finite(p.V) || p.T.Before(from) || p.T.After(to) {
				pen = false
				continue
			}
			px, py := x(p.T), y(p.V)
			switch {
			case !pen:
				fmt.Fprintf(&d, "M%s %s", ff(px), ff(py))
			case s.Step:
				fmt.Fprintf(&d, "H%s V%s", ff(px), ff(py))
			default:
				fmt.Fprintf(&d, "L%s %s", ff(px), ff(py))
			}
			pen, lastY = true, py
			out.Points++
			if s.Dots || p.Fail {
				cls := s.Class
				if p.Fail {
					cls += " fail"
				}
				title := fmt.Sprintf("%s — %s: %s", p.T.UTC().Format("2006-01-02 15:04:05Z"), s.Name, num(p.V))
				if p.N > 1 {
					title += fmt.Sprintf(" (mean of %d, %s–%s)", p.N, num(p.Lo), num(p.Hi))
				}
				if p.Fail {
					title += " — failed"
				}
				out.Dots = append(out.Dots, svgDot{Class: cls, X: px, Y: py, R: 2.5, Title: title, Series: s.Class})
			}
		}
		if s.Step && pen {
			fmt.Fprintf(&d, "H%s V%s", ff(out.X1), ff(lastY))
		}
		if d.Len() > 0 {
			out.Lines = append(out.Lines, svgLine{Class: s.Class, D: d.String(), Dashed: s.Dashed})
		}
	}
	for _, m := range c.Markers {
		if m.T.Before(from) || m.T.After(to) {
			continue
		}
		out.Markers = append(out.Markers, svgMarker{Class: m.Class, X: x(m.T),
			Title: m.T.UTC().Format("2006-01-02 15:04:05Z") + " — " + m.Label, Anchor: "start", Label: m.Label})
	}
	if c.LabelMarkers {
		placeLabels(out.Markers, float64(out.W))
	} else {
		for i := range out.Markers {
			out.Markers[i].Label = ""
		}
	}
	return out
}

// Marker labels are laid out in labelRows rows above the plot, each
// label where it cannot cover another: charWidth is a generous width of
// one character of the labels' 11-unit bold font, so an estimate errs
// towards more room.
const (
	labelRows  = 3
	charWidth  = 7.0
	labelGap   = 6.0
	labelLimit = 48 // runes; longer labels are cut with …
)

// labelPriority orders the kinds of rollout events whose labels are
// placed first when there is no room for all: a rollback before a hold
// or a release, before an operator's change, a promotion, the config.
var labelPriority = map[string]int{"mk-rollback": 0, "mk-hold": 1, "mk-release": 1, "mk-operator": 2, "mk-promotion": 3,
	"mk-config": 4, "mk-change": 4}

// placeLabels gives each marker's label a row and an anchor so that no
// two labels overlap and none leaves the chart's width w: a label reads
// rightwards from its line, or leftwards when it would pass the right
// edge, in the first row where it covers no label placed before it.
// Labels are placed by priority, then left to right; a label with no
// room is left out of the drawing (its marker keeps it in its tooltip).
func placeLabels(ms []svgMarker, w float64) {
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return labelPriority[ms[order[a]].Class] < labelPriority[ms[order[b]].Class]
	})
	type span struct{ lo, hi float64 }
	var rows [labelRows][]span
	for _, i := range order {
		m := &ms[i]
		label := text.Cell(m.Label, labelLimit)
		m.Label = ""
		// Cut a label wider than the room on either side of its line
		// to the wider side (a few characters at least).
		if room := math.Max(w-2-m.X, m.X-2); float64(len([]rune(label)))*charWidth > room {
			n := int(room / charWidth)
			if n < 8 {
				continue
			}
			label = text.Cell(label, n)
		}
		width := float64(len([]rune(label))) * charWidth
		lo, hi, anchor := m.X, m.X+width, "start"
		if hi > w-2 {
			lo, hi, anchor = m.X-width, m.X, "end"
		}
		for r := range rows {
			free := true
			for _, sp := range rows[r] {
				if lo < sp.hi+labelGap && sp.lo < hi+labelGap {
					free = false
					break
				}
			}
			if free {
				rows[r] = append(rows[r], span{lo, hi})
				m.Label, m.Anchor = label, anchor
				m.LabelY = float64(padTop) + float64(r+1)*markerLabel - 3
				break
			}
		}
	}
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func ff(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func roundTo(v, step float64) float64 { return math.Round(v/step) * step }

// timeTicks returns about six ticks on round times between from and to.
func timeTicks(from, to time.Time, x func(time.Time) float64) []tick {
	span := to.Sub(from)
	steps := []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
		48 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 30 * 24 * time.Hour}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= 6 {
			step = s
			break
		}
	}
	format := "15:04"
	if step >= 24*time.Hour {
		format = "Jan 2"
	} else if span > 24*time.Hour {
		format = "Jan 2 15:04"
	}
	var out []tick
	for t := from.UTC().Truncate(step); !t.After(to); t = t.Add(step) {
		if t.Before(from) {
			continue
		}
		out = append(out, tick{Pos: x(t), Label: t.Format(format)})
	}
	return out
}
