package cache

import (
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// Hit kinds, as they appear in Result.FromCache.
const (
	KindExact    = "exact"
	KindSemantic = "semantic"
)

// Hit is a cache answer.
type Hit struct {
	Kind string
	Key  string
	// Similarity is 1 for exact hits.
	Similarity float64
	StoredAt   time.Time
	// Result is the cached answer, already re-addressed to the asking
	// request and marked FromCache.
	Result schemas.Result
	Reason string
}
