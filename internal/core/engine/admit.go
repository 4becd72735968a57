package engine

import (
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// PriorityOf is the engine priority of a request class: the class rank,
// so the waiting queue serves critical first (vLLM's priority policy).
// Unknown classes rank as the highest, as schemas.PriorityRank's -1 clamps.
func PriorityOf(class string) int { return max(0, schemas.PriorityRank(class)) }

// RefuseLate is the worker's last check before it starts a dispatched
// request: work whose deadline has already passed is answered with
// deadline_exceeded instead of computed, since nobody can use the answer.
// The live worker and the simulator both ask it.
func RefuseLate(a *schemas.Admitted, now time.Time, worker string) *schemas.Error {
	if a.Deadline.IsZero() || !now.After(a.Deadline) {
		return nil
	}
	return schemas.Errf(schemas.CodeDeadlineExceeded, "", "deadline passed before worker %s could start it; not computed", worker)
}

// RefuseModel answers a request for a model this engine does not serve: a
// simulated replica holds one model's weights, and a request routed to it
// for another must not be served as if it were that model.
func (e *Engine) RefuseModel(model, worker string) *schemas.Error {
	if model == "" || strings.EqualFold(model, e.rep.Model.Name) {
		return nil
	}
	return schemas.Errf(schemas.CodeUnplaceable, "model", "worker %s serves %s, not %s", worker, e.rep.Model.Name, model)
}
