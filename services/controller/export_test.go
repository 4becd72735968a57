package controller

// Test-only views of the controller's state, for the external tests.

// Known reports the live (heartbeating, not draining) workers of a pool.
func (s *Scaler) Known(pool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.seen {
		if w.pool == pool && !w.hb.Draining && s.now().Sub(w.at) <= s.cfg.StaleAfter {
			n++
		}
	}
	return n
}

// Planner is the name of what sizes the pools.
func (c *Controller) Planner() string { return c.ctl.Name() }
