// Package scalebench holds the pure parts of the scale benchmark (test/scale): reading the
// manager's Prometheus metrics, percentiles, and the table it writes into docs/benchmarks.md.
package scalebench

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Sample is one line of Prometheus' text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is every sample of one scrape.
type Metrics []Sample

// ParseMetrics reads Prometheus' text exposition format (version 0.0.4): comments and blank
// lines are skipped, timestamps ignored.
func ParseMetrics(text string) (Metrics, error) {
	var out Metrics
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n+1, line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	rest := line
	i := strings.IndexAny(rest, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name, rest = rest[:i], rest[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if rest == "" {
				return s, fmt.Errorf("unterminated labels")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("malformed label")
			}
			name := strings.TrimSpace(rest[:eq])
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' && i+1 < len(rest) {
					i++
					switch rest[i] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[i])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[i+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return s, fmt.Errorf("unterminated label value")
			}
			s.Labels[name] = val.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := parseValue(fields[0])
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

func parseValue(f string) (float64, error) {
	switch f {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(f, 64)
}

// matches tells whether s carries every label of want.
func (s Sample) matches(name string, want map[string]string) bool {
	if s.Name != name {
		return false
	}
	for k, v := range want {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// Sum is the sum of the samples of name whose labels include want.
func (m Metrics) Sum(name string, want map[string]string) float64 {
	var t float64
	for _, s := range m {
		if s.matches(name, want) {
			t += s.Value
		}
	}
	return t
}

// SumBy sums the samples of name whose labels include want, by the value of label.
func (m Metrics) SumBy(name, label string, want map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m {
		if s.matches(name, want) {
			out[s.Labels[label]] += s.Value
		}
	}
	return out
}

// Bucket is one cumulative bucket of a histogram: how many observations were at most Le.
type Bucket struct {
	Le    float64
	Count float64
}

// Histogram is the cumulative buckets of histogram name (its _bucket samples) whose labels
// include want, summed over the other labels, in order of their bounds.
func (m Metrics) Histogram(name string, want map[string]string) []Bucket {
	by := map[float64]float64{}
	for _, s := range m {
		if !s.matches(name+"_bucket", want) {
			continue
		}
		le, err := parseValue(s.Labels["le"])
		if err != nil {
			continue
		}
		by[le] += s.Value
	}
	out := make([]Bucket, 0, len(by))
	for le, c := range by {
		out = append(out, Bucket{le, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Le < out[j].Le })
	return out
}

// Delta is the histogram of the observations made between before and after (both cumulative,
// with the same bounds; a bound missing from before counts from zero).
func Delta(before, after []Bucket) []Bucket {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.Le] = b.Count
	}
	out := make([]Bucket, len(after))
	for i, b := range after {
		out[i] = Bucket{b.Le, b.Count - prev[b.Le]}
	}
	return out
}

// Quantile estimates quantile q (0..1) of a cumulative histogram as Prometheus'
// histogram_quantile does: linearly within the bucket the rank falls in, the lowest bucket
// starting at 0; a rank in the +Inf bucket is the highest finite bound. NaN without observations.
func Quantile(q float64, buckets []Bucket) float64 {
	if len(buckets) == 0 {
		return math.NaN()
	}
	total := buckets[len(buckets)-1].Count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range buckets {
		if b.Count >= rank && b.Count > below {
			if math.IsInf(b.Le, 1) {
				if i == 0 {
					return math.NaN()
				}
				return buckets[i-1].Le
			}
			return lower + (b.Le-lower)*(rank-below)/(b.Count-below)
		}
		lower, below = b.Le, b.Count
	}
	return buckets[len(buckets)-1].Le
}
