package serve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkSendAnswer compares the two ways a buffered answer leaves the
// exchange that holds it (sendAnswer): copied into fasthttp's response,
// or handed over as a body stream that returns the exchange when closed.
// Each iteration sets the body and writes the whole response.
func BenchmarkSendAnswer(b *testing.B) {
	s := &Flow{}
	s.exchanges.New = func() any { return new(Exchange) }
	for _, size := range []int{1 << 10, 16 << 10, 256 << 10, 1 << 20} {
		ans := bytes.Repeat([]byte("a"), size)
		w := bufio.NewWriter(io.Discard)
		b.Run(fmt.Sprintf("copy/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var resp fasthttp.Response
			for b.Loop() {
				x := s.Get()
				x.ans = append(x.ans[:0], ans...)
				resp.SetBody(x.ans)
				s.Put(x)
				_ = resp.Write(w)
				resp.Reset()
			}
		})
		b.Run(fmt.Sprintf("stream/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var resp fasthttp.Response
			for b.Loop() {
				x := s.Get()
				x.ans = append(x.ans[:0], ans...)
				x.out.s, x.out.x = s, x
				x.out.Reset(x.ans)
				resp.SetBodyStream(&x.out, len(x.ans))
				_ = resp.Write(w)
				resp.Reset() // closes the stream: x back to the pool
			}
		})
	}
}
