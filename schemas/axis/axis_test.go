package axis

import (
	"math"
	"testing"
)

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{
		0.3: 0.5, 0.7: 1, 1: 1, 1.2: 2, 3: 5, 6: 10, 4400: 5000, 1.1: 2, 2: 2, 2.5: 5, 7: 10, 10: 10, 42: 50, 1234: 2000,
		0: 1, -3: 1, math.Inf(1): 1, math.NaN(): 1,
	} {
		if got := NiceStep(raw); math.Abs(got-want) > 1e-12*want {
			t.Errorf("NiceStep(%v) = %v, want %v", raw, got, want)
		}
	}
}
