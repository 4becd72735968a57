package svc

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/subjects"
)

// RouterBacklog is the one definition of a class's router backlog: the
// admitted requests of that class not yet delivered to a router plus those
// delivered and not yet acknowledged — a router acks an admitted request
// only once it is dispatched, so those are still queued (or held for a cold
// start) in a router. The admitter sheds against it and the controller
// sizes the fleet by it.
func RouterBacklog(ctx context.Context, js jetstream.JetStream, class string) (int, error) {
	cons, err := js.Consumer(ctx, subjects.StreamAdmitted, subjects.RouterConsumer(class))
	if err != nil {
		return 0, fmt.Errorf("router consumer for %s: %w", class, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		info = cons.CachedInfo()
	}
	return int(info.NumPending) + info.NumAckPending, nil
}
