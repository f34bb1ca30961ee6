package scan

import (
	"fmt"
	"strings"
	"testing"
)

// chatBody builds a realistic chat body of about size bytes.
func chatBody(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"agent-chat","messages":[{"role":"system","content":"You are a helpful agent. Answer with one JSON action."}`)
	i := 0
	for b.Len() < size-120 {
		fmt.Fprintf(&b, `,{"role":"user","content":"Question %d: what is the weather like in the city today, and should I bring an umbrella \"please\"?"}`, i)
		i++
	}
	b.WriteString(`],"max_tokens":256,"user":"user-42"}`)
	return []byte(b.String())
}

func BenchmarkScan(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 4 << 20} {
		body := chatBody(size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var r Request
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Scan(body, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
