// Package fleetlearn owns the one thing a service needs to serve models the
// catalog does not know: it follows the workers' heartbeats and teaches a
// learning catalog (catalog.Learning) every model a worker describes, so a
// router's cost model and weight sizes cover what the fleet actually
// serves. It is kept out of package catalog so the catalog stays pure data.
package fleetlearn

import (
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Follow subscribes to every heartbeat and teaches cat the models they
// describe. cat must be a learning catalog. Unsubscribe the returned
// subscription to stop.
func Follow(nc *nats.Conn, cat *catalog.Catalog, log *slog.Logger) (*nats.Subscription, error) {
	if !cat.CanLearn() {
		return nil, errors.New("fleetlearn: the catalog cannot learn (make it with catalog.Learning)")
	}
	return nc.Subscribe(subjects.HeartbeatAll, func(m *nats.Msg) {
		f, err := schemas.FormatFromContentType(m.Header.Get(schemas.HeaderContentType))
		if err != nil {
			return
		}
		var hb schemas.Heartbeat
		if err := schemas.Unmarshal(f, m.Data, &hb); err != nil {
			return
		}
		added, errs := cat.LearnFrom(hb)
		for _, name := range added {
			log.Info("learned a model from the fleet", "model", name, "worker", hb.WorkerID)
		}
		for _, err := range errs {
			log.Warn("model description refused", "err", err)
		}
	})
}
