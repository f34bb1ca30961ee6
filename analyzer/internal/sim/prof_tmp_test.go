package sim

import (
	"os"
	"testing"
)

func TestProfTmp(t *testing.T) {
	if os.Getenv("SIMPROF") == "" {
		t.Skip()
	}
	o := DefaultOptions()
	h, _, _ := Select("baseline")
	o.Healthy, o.Broken = h, nil
	o.Rates = []float64{1000}
	if os.Getenv("SIMPROF") == "low" {
		o.Rates = []float64{0.1, 1}
	}
	o.Runs, o.Days, o.Workers = 1, 1.2, 1
	Run(o)
}
