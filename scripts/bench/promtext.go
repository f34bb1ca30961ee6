package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// promSample is one sample line of Prometheus' text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// promSamples is a scrape: what a /metrics page held.
type promSamples []promSample

// parsePromText reads a page of Prometheus' text format with the
// Prometheus project's own parser (expfmt) into samples: a counter,
// gauge or untyped series as itself; a histogram as its _bucket (with
// le), _sum and _count; a summary as its quantiles, _sum and _count. A
// page that does not parse is an error.
func parsePromText(text string) (promSamples, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out promSamples
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			with := func(k, v string) map[string]string {
				c := make(map[string]string, len(labels)+1)
				for a, b := range labels {
					c[a] = b
				}
				c[k] = v
				return c
			}
			switch {
			case m.Counter != nil:
				out = append(out, promSample{name, labels, m.GetCounter().GetValue()})
			case m.Gauge != nil:
				out = append(out, promSample{name, labels, m.GetGauge().GetValue()})
			case m.Untyped != nil:
				out = append(out, promSample{name, labels, m.GetUntyped().GetValue()})
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out = append(out, promSample{name + "_bucket", with("le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)), float64(b.GetCumulativeCount())})
				}
				out = append(out, promSample{name + "_sum", labels, h.GetSampleSum()},
					promSample{name + "_count", labels, float64(h.GetSampleCount())})
			case m.Summary != nil:
				sm := m.GetSummary()
				for _, q := range sm.GetQuantile() {
					out = append(out, promSample{name, with("quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)), q.GetValue()})
				}
				out = append(out, promSample{name + "_sum", labels, sm.GetSampleSum()},
					promSample{name + "_count", labels, float64(sm.GetSampleCount())})
			}
		}
	}
	return out, nil
}

// sum adds the values of every series of the named sample (all label
// sets); ok is false when there is none.
func (ss promSamples) sum(name string) (total float64, ok bool) {
	for _, s := range ss {
		if s.name == name {
			total += s.value
			ok = true
		}
	}
	return total, ok
}

// sumBy adds the named sample's values per value of label.
func (ss promSamples) sumBy(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		if s.name == name {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

// scrape GETs a /metrics page (5 s at most) and parses it.
func scrape(ctx context.Context, client *http.Client, url string) (promSamples, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	ss, err := parsePromText(string(b))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return ss, nil
}
