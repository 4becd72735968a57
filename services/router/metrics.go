package router

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
)

// The router's metric handles and histogram buckets.

// dispatchedCounter is switchyard_dispatched_total for a class and GPU.
func (r *Router) dispatchedCounter(class, gpu string) *metrics.Counter {
	k := [2]string{class, gpu}
	c := r.dispatched[k]
	if c == nil {
		c = r.sh.Metrics.GetOrCreateCounter(fmt.Sprintf(`switchyard_dispatched_total{class=%q,gpu=%q}`, class, gpu))
		r.dispatched[k] = c
	}
	return c
}

// Histogram buckets (Prometheus `le` bounds, so histogram_quantile works on
// any Prometheus): a routing-core step takes microseconds to a few
// milliseconds; a request waits in the class queue from milliseconds to
// its deadline.
var (
	placementBuckets = []float64{5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 50e-3, 0.25}
	queueWaitBuckets = []float64{1e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}
)
