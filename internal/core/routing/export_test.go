package routing

// InFlight is the number of dispatched requests without a final result,
// for tests (production reads no such count).
func (c *Core) InFlight() int { return len(c.placedOn) }
