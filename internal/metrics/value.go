package metrics

import "fmt"

// Value reads one metric from the registry, summed over the series whose
// labels include every pair in match: a counter's or gauge's value, a
// histogram's sample count. It is 0 for a name with no series (a vector nothing
// was counted in yet is not gathered). It is for tests and diagnostics (a
// scrape reads the registry through Handler).
func (m *Metrics) Value(name string, match map[string]string) (float64, error) {
	mfs, err := m.reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gathering metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
	series:
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue series
				}
			}
			switch {
			case mt.GetCounter() != nil:
				sum += mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				sum += mt.GetGauge().GetValue()
			case mt.GetHistogram() != nil:
				sum += float64(mt.GetHistogram().GetSampleCount())
			}
		}
		return sum, nil
	}
	return 0, nil
}
