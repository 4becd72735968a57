package routing

import (
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// EventModelLearned records a model the catalog learned from a worker's
// heartbeat (Config.Catalog): from this input on, placement prices it.
const EventModelLearned = "model_learned"

// learn teaches the catalog the models hb describes that it does not know
// yet, one event each. A description that does not validate teaches
// nothing; the model then stays unpriced, as an unknown one always was
// (the worker's heartbeats repeat it, so it is not reported each time).
func (c *Core) learn(hb *schemas.Heartbeat, now time.Time) {
	cat := c.cfg.Catalog
	if cat == nil || !cat.CanLearn() {
		return
	}
	described := false
	for i := range hb.Models {
		if hb.Models[i].Spec != nil {
			described = true
			break
		}
	}
	if !described {
		return
	}
	added, _ := cat.LearnFrom(*hb)
	for _, name := range added {
		c.acts = append(c.acts, Action{Kind: ActEvent, Event: &schemas.Event{Kind: EventModelLearned, At: now, WorkerID: hb.WorkerID,
			Reason: "the catalog learned model " + name + " from " + hb.WorkerID + "'s heartbeat: placement prices it from here on",
			Fields: map[string]any{"model": strings.ToLower(name)}}})
	}
}
