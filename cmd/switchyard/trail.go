package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/switchyard-ai/switchyard/internal/adapter/trail"
)

// runTrail prints, for each request id, every stored message that names
// it: submission, admission, each dispatch and its worker's ack, the
// decision events and the result — where a request stopped.
func runTrail(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("trail", flag.ContinueOnError)
	src := recordedFlags(fs)
	since := fs.String("since", "", "skip messages stored before this: RFC 3339 time, or a duration ago like 15m (default: everything)")
	jsonOut := fs.Bool("json", false, "print one JSON object: request id → its steps")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ids := fs.Args()
	if len(ids) == 0 {
		return fmt.Errorf("trail: name at least one request id (switchyard trail [--nats URL | --store DIR] ID...)")
	}
	from, err := parseWhen(*since, time.Now())
	if err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	js, closeStreams, err := src.open(ctx, "trail")
	if err != nil {
		return err
	}
	defer closeStreams()
	found, err := trail.Find(ctx, js, ids, trail.Options{Since: from})
	if err != nil {
		return err
	}
	if *jsonOut {
		b, err := json.Marshal(found)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	for _, id := range ids {
		fmt.Fprint(stdout, trail.Format(id, found[id]))
	}
	return nil
}
