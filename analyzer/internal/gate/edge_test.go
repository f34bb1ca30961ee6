package gate

import (
	"math"
	"testing"
)

// TestLowerEdge: the search returns the interval's lower end from
// outside, within 10⁻⁹ in log-odds, in few evaluations, and handles an
// interval that reaches 0, an inside of 1 and a g that is undefined
// (NaN) or infinite away from the edge.
func TestLowerEdge(t *testing.T) {
	logit := func(p float64) float64 { return math.Log(p) - math.Log1p(-p) }
	for _, edge := range []float64{1e-300, 1e-12, 1e-6, 0.003, 0.2, 0.5, 0.9, 0.999999} {
		for _, shape := range []struct {
			name string
			g    func(p float64) float64
		}{
			{"linear in log-odds", func(p float64) float64 { return logit(edge) - logit(p) }},
			{"steep", func(p float64) float64 { return math.Expm1(5 * (logit(edge) - logit(p))) }},
			{"infinite below", func(p float64) float64 {
				if p < edge/2 {
					return math.Inf(1)
				}
				return math.Cbrt(logit(edge) - logit(p))
			}},
			{"NaN below", func(p float64) float64 {
				if p < edge/4 {
					return math.NaN()
				}
				return logit(edge) - logit(p)
			}},
		} {
			calls := 0
			g := func(p float64) float64 { calls++; return shape.g(p) }
			inside := edge + (1-edge)/2
			got := lowerEdge(inside, 0.5, g)
			if d := logit(edge) - logit(got); shape.g(got) < 0 || math.Abs(d) > 1e-9 {
				t.Errorf("%s, edge %g: lowerEdge = %g (%.3g below in log-odds, g %g); want outside (g ≥ 0) within 1e-9 of the edge", shape.name, edge, got, d, shape.g(got))
			}
			if calls > 80 {
				t.Errorf("%s, edge %g: %d evaluations; want at most 80", shape.name, edge, calls)
			}
		}
	}
	if got := lowerEdge(0.5, 0.5, func(float64) float64 { return -1 }); got != 0 {
		t.Errorf("interval reaching 0: lowerEdge = %g; want 0", got)
	}
	if got := lowerEdge(1, 0.5, func(p float64) float64 { return 0.3 - p }); got > 0.3 || 0.3-got > 1e-9 {
		t.Errorf("inside 1: lowerEdge = %g; want 0.3 from below", got)
	}
}

// TestSearchNear: started from any guess, in or out of the range, the
// galloping search finds what halving the whole range finds.
func TestSearchNear(t *testing.T) {
	for from := int64(0); from < 5; from++ {
		for to := from; to < from+40; to++ {
			for answer := from; answer <= to; answer++ {
				ok := func(s int64) bool { return s >= answer }
				for guess := from - 3; guess <= to+3; guess++ {
					if got := searchNear(from, to, guess, ok); got != answer {
						t.Fatalf("searchNear(%d, %d, guess %d) = %d; want %d", from, to, guess, got, answer)
					}
				}
			}
		}
	}
}
