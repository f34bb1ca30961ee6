// Package axis holds what the charts (the collector's console, bench's
// results) share about an axis.
package axis

import "math"

// NiceStep rounds raw up to 1, 2 or 5 times a power of ten: the step
// between an axis's labelled ticks. raw not above zero, or not finite,
// gives 1.
func NiceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 1) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
