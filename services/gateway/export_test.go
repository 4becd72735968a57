package gateway

import "github.com/switchyard-ai/switchyard/schemas"

// What the instant backend received, for the tests that check what the
// gateway sent on.

// Cancels delivers every Cancel the backend received (buffered; extra
// cancels are dropped when nobody reads).
func (b *InstantBackend) Cancels() <-chan schemas.Cancel { return b.cancels }

// Request returns the request the backend received with id.
func (b *InstantBackend) Request(id string) (schemas.Request, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.seen[id]
	return r, ok
}
