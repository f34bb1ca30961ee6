package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started (a
// test server's handler, a client connection) is still running at the end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testPage(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func sameGauges(got, want Gauges) bool {
	return near(got.Running, want.Running) && near(got.Waiting, want.Waiting) && near(got.KVCacheUsage, want.KVCacheUsage)
}

// TestParsePages reads engine pages shaped as vLLM and SGLang serve
// them (HELP and TYPE lines, counters, histograms with _created series,
// process metrics, several label series).
func TestParsePages(t *testing.T) {
	for _, tc := range []struct {
		page string
		want Gauges
	}{
		// vLLM v1, one engine.
		{"vllm.txt", Gauges{Running: 7, Waiting: 3, KVCacheUsage: 0.41}},
		// vLLM v1 with data parallelism: engines "0" and "1" summed.
		{"vllm_dp2.txt", Gauges{Running: 12, Waiting: 4, KVCacheUsage: 0.74}},
		// A vLLM release that exports the new and the deprecated KV gauge
		// with the same value: counted once.
		{"vllm_both_kv.txt", Gauges{Running: 4, Waiting: 2, KVCacheUsage: 0.5}},
		// vLLM v0: gpu_cache_usage_perc only; two model_name series
		// (the base model and a LoRA adapter).
		{"vllm_v0.txt", Gauges{Running: 3, Waiting: 4, KVCacheUsage: 0.375}},
		// SGLang with --enable-metrics.
		{"sglang.txt", Gauges{Running: 12, Waiting: 9, KVCacheUsage: 0.62}},
	} {
		t.Run(tc.page, func(t *testing.T) {
			got, err := Parse(testPage(t, tc.page))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !sameGauges(got, tc.want) || !got.At.IsZero() {
				t.Errorf("Parse = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		page    string
		want    Gauges
		wantErr error
	}{
		{
			name: "untyped, no HELP or TYPE",
			page: "vllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 5\n",
			want: Gauges{Waiting: 7},
		},
		{
			name: "a missing gauge is 0",
			page: "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 3\n",
			want: Gauges{Waiting: 3},
		},
		{
			name: "quoted UTF-8 name",
			page: "{\"vllm:num_requests_running\",model_name=\"m\"} 4\n",
			want: Gauges{Running: 4},
		},
		{
			name: "timestamps and exponents",
			page: "vllm:kv_cache_usage_perc{engine=\"0\"} 2.5e-1 1764010012000\n",
			want: Gauges{KVCacheUsage: 0.25},
		},
		{
			name: "the same name as a counter is no gauge",
			page: "# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting 9\nvllm:num_requests_running 1\n",
			want: Gauges{Running: 1},
		},
		{
			name:    "no engine gauge",
			page:    "# TYPE process_open_fds gauge\nprocess_open_fds 87\nvllm:prompt_tokens_total 12\n",
			wantErr: ErrNoGauges,
		},
		{name: "empty page", page: "", wantErr: ErrNoGauges},
		{name: "NaN", page: "vllm:num_requests_waiting NaN\n", wantErr: ErrValue},
		{name: "+Inf", page: "sglang:token_usage +Inf\n", wantErr: ErrValue},
		{name: "sum overflows", page: "sglang:num_queue_reqs{a=\"1\"} 1e308\nsglang:num_queue_reqs{a=\"2\"} 1e308\n", wantErr: ErrValue},
		{name: "negative", page: "sglang:num_running_reqs -1\n", wantErr: ErrValue},
		{name: "garbage", page: "<html><body>502 Bad Gateway</body></html>\n", wantErr: ErrParse},
		{name: "binary", page: "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", wantErr: ErrParse},
		{name: "no value", page: "vllm:num_requests_waiting{model_name=\"a\"}\n", wantErr: ErrParse},
		{name: "unclosed labels", page: "vllm:num_requests_waiting{model_name=\"a 1\n", wantErr: ErrParse},
		{name: "two TYPE lines", page: "# TYPE x gauge\n# TYPE x counter\nx 1\n", wantErr: ErrParse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.page))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("Parse(%q) = %+v, %v; want %v", tc.page, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !sameGauges(got, tc.want) {
				t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.page, got, err, tc.want)
			}
		})
	}
}

// TestParseErrorSays: an error names what was wrong, so the log says it.
func TestParseErrorSays(t *testing.T) {
	_, err := Parse([]byte("vllm:num_requests_waiting 1\nvllm:num_requests_running{a=\"b\" 3\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Parse error %v; want one naming line 2", err)
	}
	_, err = Parse([]byte("sglang:num_queue_reqs NaN\n"))
	if err == nil || !strings.Contains(err.Error(), "sglang:num_queue_reqs") {
		t.Errorf("Parse error %v; want one naming sglang:num_queue_reqs", err)
	}
}

func TestScrape(t *testing.T) {
	page := testPage(t, "vllm.txt")
	var gotAccept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAccept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") && r.URL.Query().Has("gzip") {
			// prometheus_client compresses when asked; Go's transport asks.
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = zw.Write(page)
			_ = zw.Close()
			return
		}
		_, _ = w.Write(page)
	}))
	defer srv.Close()

	for _, url := range []string{srv.URL + "/metrics", srv.URL + "/metrics?gzip"} {
		before := time.Now()
		got, err := Scrape(t.Context(), srv.Client(), url)
		if err != nil {
			t.Fatalf("Scrape(%s): %v", url, err)
		}
		if want := (Gauges{Running: 7, Waiting: 3, KVCacheUsage: 0.41}); !sameGauges(got, want) {
			t.Errorf("Scrape(%s) = %+v; want %+v", url, got, want)
		}
		if got.At.Before(before) || got.At.After(time.Now()) {
			t.Errorf("At = %v; want the time of the scrape", got.At)
		}
		if !strings.HasPrefix(gotAccept, "text/plain;version=0.0.4") {
			t.Errorf("Accept = %q; want the Prometheus text format first", gotAccept)
		}
	}
}

func TestScrapeErrors(t *testing.T) {
	valid := testPage(t, "sglang.txt")
	overCap := bytes.Repeat([]byte("# pad\n"), MaxPage/6+1)[:MaxPage+1]

	mux := http.NewServeMux()
	mux.HandleFunc("/500", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "engine dead", http.StatusInternalServerError)
	})
	mux.HandleFunc("/404", http.NotFound) // SGLang without --enable-metrics
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("{\"object\":\"error\",\"message\":\"not found\"}\n"))
	})
	mux.HandleFunc("/over-cap", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(overCap)))
		_, _ = w.Write(overCap)
	})
	mux.HandleFunc("/over-cap-chunked", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(overCap[:1<<20])
		w.(http.Flusher).Flush() // no Content-Length: chunked
		_, _ = w.Write(overCap[1<<20:])
	})
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	mux.HandleFunc("/hang-in-body", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(valid[:100])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String() + "/metrics"
	_ = closed.Close()

	for _, tc := range []struct {
		path    string
		url     string
		wantErr error
		says    string
		slow    bool // reads MaxPage bytes
	}{
		{path: "/500", wantErr: ErrStatus, says: "500"},
		{path: "/404", wantErr: ErrStatus, says: "404"},
		{path: "/garbage", wantErr: ErrParse, says: "line 1"},
		{path: "/over-cap", wantErr: ErrTooLarge, says: "Content-Length"},
		{path: "/over-cap-chunked", wantErr: ErrTooLarge, says: strconv.Itoa(MaxPage), slow: true},
		{path: "/hang", wantErr: context.DeadlineExceeded},
		{path: "/hang-in-body", wantErr: context.DeadlineExceeded, says: "read the page"},
		{path: "refused", url: refused, says: "connect"},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			if tc.slow && raceDetector {
				t.Skip("reads 4 MiB; seconds under -race, which it does not need")
			}
			url := tc.url
			if url == "" {
				url = srv.URL + tc.path
			}
			timeout := 200 * time.Millisecond
			if tc.slow {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			start := time.Now()
			got, err := Scrape(ctx, srv.Client(), url)
			if err == nil {
				t.Fatalf("Scrape(%s) = %+v, nil; want an error", tc.path, got)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Scrape(%s) error %v; want %v", tc.path, err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), url) {
				t.Errorf("Scrape(%s) error %q; want it to name %q and the URL", tc.path, err, tc.says)
			}
			if d := time.Since(start); !tc.slow && d > time.Second {
				t.Errorf("Scrape(%s) took %v; want the context's 200ms", tc.path, d)
			}
		})
	}
}

// TestReadPageCap: a page of MaxPage bytes is read whole, whether its
// length is announced or not; one byte more is refused (unannounced, by
// TestScrapeErrors/over-cap-chunked).
func TestReadPageCap(t *testing.T) {
	if raceDetector {
		t.Skip("reads 4 MiB pages; seconds under -race, which it does not need")
	}
	for _, tc := range []struct {
		size     int
		announce bool
		wantErr  error
	}{
		{MaxPage, true, nil},
		{MaxPage, false, nil},
		{MaxPage + 1, true, ErrTooLarge},
	} {
		length := int64(-1)
		if tc.announce {
			length = int64(tc.size)
		}
		page, err := readPage(bytes.NewReader(make([]byte, tc.size)), length)
		if !errors.Is(err, tc.wantErr) || (err == nil && len(page) != tc.size) {
			t.Errorf("readPage(%d bytes, length %d) = %d bytes, %v; want %v", tc.size, length, len(page), err, tc.wantErr)
		}
	}
}

// TestScrapeDefaultTimeout: a context without deadline gets
// DefaultTimeout (shortened here to 100ms).
func TestScrapeDefaultTimeout(t *testing.T) {
	defer func(d time.Duration) { defaultTimeout = d }(defaultTimeout)
	defaultTimeout = 100 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	start := time.Now()
	_, err := Scrape(context.Background(), srv.Client(), srv.URL)
	if d := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || d < defaultTimeout || d > defaultTimeout+time.Second {
		t.Errorf("Scrape of a hanging server = %v after %v; want a deadline error after %v", err, d, defaultTimeout)
	}
}

// FuzzParse feeds Parse untrusted bytes: it must not panic, and what it
// accepts is usable as a load.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"vllm.txt", "sglang.txt"} {
		f.Add(testPage(f, name))
	}
	for _, s := range []string{
		"",
		"vllm:num_requests_waiting 1\n",
		"{\"vllm:num_requests_running\",model_name=\"m\"} 4\n",
		"# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\nh_sum 3\n",
		"# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_count 2\ns_sum 3\nsglang:token_usage 0.5\n",
		"vllm:kv_cache_usage_perc{a=\"\\\"\\n\\\\\"} 1e308\nvllm:kv_cache_usage_perc 1e308\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		g, err := Parse(page)
		if err != nil {
			return
		}
		for _, v := range []float64{g.Running, g.Waiting, g.KVCacheUsage} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Errorf("Parse(%q) = %+v; a gauge is NaN, infinite or negative", page, g)
			}
		}
	})
}

// BenchmarkParse parses a one-engine vLLM page (29 KB: 10 histograms,
// counters, process metrics) and an SGLang page (18 KB), as the gateway
// does for every replica every engine_metrics.interval.
func BenchmarkParse(b *testing.B) {
	for _, name := range []string{"vllm.txt", "sglang.txt"} {
		page := testPage(b, name)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(page); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
