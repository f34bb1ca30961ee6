package sim
import ("os";"testing")
func TestQuick(t *testing.T){ o:=DefaultOptions(); o.Days=1; o.Rates=[]float64{10}; o.Runs=5; r:=Run(o); r.Print(os.Stdout)}
