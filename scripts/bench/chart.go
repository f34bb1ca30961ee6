package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/graygate/graygate/schemas/axis"
)

// cpuTargetUS is SPEC §12's gateway CPU per request, drawn on the chart.
const cpuTargetUS = 22

// writeChart draws r as a PNG at path: on top, throughput per target as
// bars grouped by connection count; below, each proxy's CPU per request
// the same way (the mock called directly has no proxy), with SPEC §12's
// 22 µs as a dashed line. A target keeps its colour in both panels; a
// cell that failed is a missing bar.
func writeChart(path string, r Results) error {
	var names []string
	for _, t := range r.Targets {
		if t.Skipped == "" {
			names = append(names, t.Name)
		}
	}
	if len(names) == 0 || len(r.Settings.Conns) == 0 {
		return fmt.Errorf("nothing to draw: no target measured")
	}
	ix := indexCells(r.Cells)
	groups := make([]string, len(r.Settings.Conns))
	for i, n := range r.Settings.Conns {
		groups[i] = fmt.Sprintf("%d conn", n)
		if n > 1 {
			groups[i] += "s"
		}
	}
	value := func(name string, conns int, cpu bool) float64 {
		c, ok := ix.get(name, conns)
		switch {
		case !ok:
			return 0
		case !cpu:
			return c.RPS
		case c.CPUUSPerReq != nil:
			return *c.CPUUSPerReq
		}
		return 0
	}

	panel := func(title, ylabel string, cpu bool) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		var drawn []string
		for _, name := range names {
			if cpu && name == tDirect {
				continue
			}
			drawn = append(drawn, name)
		}
		// About 200 points per group on a 10-inch chart, bars side by side.
		w := vg.Points(min(36, 180/float64(len(drawn))))
		maxY := 0.0
		for i, name := range drawn {
			vals := make(plotter.Values, len(r.Settings.Conns))
			for j, n := range r.Settings.Conns {
				vals[j] = value(name, n, cpu)
				maxY = max(maxY, vals[j])
			}
			bars, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return nil, err
			}
			bars.LineStyle.Width = 0
			bars.Color = targetColor(name)
			bars.Offset = vg.Length(float64(i)-float64(len(drawn)-1)/2) * w
			p.Add(bars)
			p.Legend.Add(name, bars)
		}
		if cpu {
			line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: cpuTargetUS}, {X: float64(len(groups)) - 0.5, Y: cpuTargetUS}})
			if err != nil {
				return nil, err
			}
			line.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			line.LineStyle.Color = color.Black
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("§12 gateway target %d µs", cpuTargetUS), line)
			maxY = max(maxY, cpuTargetUS)
		}
		// Room above the tallest bar for the legend.
		p.Y.Max = maxY * 1.45
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.XOffs = vg.Points(4)
		p.Y.Tick.Marker = niceTicks{}
		p.Add(plotter.NewGrid())
		p.NominalX(groups...)
		// The same x range in both panels, so their groups line up.
		p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
		return p, nil
	}

	top, err := panel(fmt.Sprintf("graygate bench: throughput (median of %d round(s), %d CPUs shared)", r.Settings.Rounds, r.Machine.CPUs), "requests/s", false)
	if err != nil {
		return err
	}
	bottom, err := panel("CPU per request of the proxy process (all rounds pooled)", "µs per request", true)
	if err != nil {
		return err
	}

	return writeStacked(path, top, bottom)
}

// writeStacked draws top above bottom, their axes aligned, into a
// 10 × 9 inch PNG at path.
func writeStacked(path string, top, bottom *plot.Plot) error {
	img := vgimg.New(10*vg.Inch, 9*vg.Inch)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, draw.New(img))
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// targetColors keep each target's colour from run to run (Tableau 10):
// the references in grey, green and blue, the gateway's modes in warm hues.
var targetColors = map[string]color.RGBA{
	tDirect:     {0xba, 0xb0, 0xac, 0xff},
	tNginx:      {0x59, 0xa1, 0x4f, 0xff},
	tFiber:      {0x4e, 0x79, 0xa7, 0xff},
	tGwS12:      {0xf2, 0x8e, 0x2b, 0xff},
	tGwGray:     {0xb0, 0x7a, 0xa1, 0xff},
	tGwAll:      {0xe1, 0x57, 0x59, 0xff},
	tGwNoEvents: {0x76, 0xb7, 0xb2, 0xff},
}

func targetColor(name string) color.Color {
	if c, ok := targetColors[name]; ok {
		return c
	}
	return color.Black
}

// niceTicks labels an axis from 0 at steps of 1, 2 or 5 × 10^n, about five
// of them, with thousands as "k" (the default ticker labels too few).
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	step := axis.NiceStep((hi - lo) / 5)
	var ticks []plot.Tick
	for i := 0; ; i++ {
		v := float64(i) * step
		if v > hi {
			break
		}
		if v >= lo {
			ticks = append(ticks, plot.Tick{Value: v, Label: shortNumber(v)})
		}
		if half := v + step/2; half >= lo && half <= hi {
			ticks = append(ticks, plot.Tick{Value: half}) // minor, unlabelled
		}
	}
	return ticks
}

// shortNumber prints 25000 as "25k" and 2.5 as "2.5".
func shortNumber(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
