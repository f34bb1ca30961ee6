package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// promSample is one sample line of Prometheus' text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// promSamples is a scrape: what a /metrics page held.
type promSamples []promSample

// parsePromText reads the sample lines of Prometheus' text format
// (comments skipped; a timestamp after the value ignored). Lines it
// cannot read are skipped: the benchmark reads a few known families and
// reports a missing one as absent.
func parsePromText(text string) promSamples {
	var out promSamples
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if s, ok := parsePromLine(line); ok {
			out = append(out, s)
		}
	}
	return out
}

func parsePromLine(line string) (promSample, bool) {
	s := promSample{}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, false
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		s.labels = map[string]string{}
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if line == "" {
				return s, false
			}
			if line[0] == '}' {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || eq+1 >= len(line) || line[eq+1] != '"' {
				return s, false
			}
			key := strings.TrimSpace(line[:eq])
			var val strings.Builder
			j := eq + 2
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[j])
					}
					continue
				}
				val.WriteByte(line[j])
			}
			if j >= len(line) {
				return s, false
			}
			s.labels[key] = val.String()
			line = line[j+1:]
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, false
	}
	s.value = v
	return s, true
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
	return parsePromText(string(b)), nil
}
