package filter

import (
	"strings"
	"testing"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// BenchmarkCheck measures Check on a ~1 KB agent-action answer (the
// content of the proxy benchmark's fixedUpstream), valid and invalid,
// with the fast path and with gojsonschema alone (the code before it).
func BenchmarkCheck(b *testing.B) {
	schema := readAgentSchema(b)
	query := strings.Repeat("q", 760)
	answers := []struct {
		name    string
		content string
		want    events.SampleReason
	}{
		{"valid", `{"action":"search","parameters":{"query":"` + query + `"},"confidence_score":0.9}`, OK},
		{"invalid", `{"action":"search","parameters":{"query":"` + query + `"},"confidence_score":1.5}`, events.ReasonSchemaViolation},
	}
	for _, a := range answers {
		for _, path := range []string{"fast", "gojsonschema"} {
			b.Run(a.name+"/"+path, func(b *testing.B) {
				f, err := New(schema, TargetContent)
				testenv.Must(b, err)
				if f.fast == nil {
					b.Fatal("agent-action schema not on the fast path")
				}
				if path == "gojsonschema" {
					f.fast = nil
				}
				contents := [][]byte{[]byte(a.content)}
				b.SetBytes(int64(len(a.content)))
				b.ReportAllocs()
				for b.Loop() {
					if r, _ := f.Check(nil, contents); r != a.want {
						b.Fatalf("Check = %q; want %q", r, a.want)
					}
				}
			})
		}
	}
}
