package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/batch"
	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/services/client"
)

const batchUsage = `usage: switchyard batch <submit|status|wait|results> [flags]

  submit FILE.jsonl --tenant T   publish an OpenAI Batch API file; prints the batch id
  status ID                      counts so far
  wait ID                        block until every request has a final result,
                                 showing deferred work (until when, why) and an ETA
  cancel ID --tenant T           stop every request that has no result yet
  results ID -o out.jsonl [--errors err.jsonl]
                                 write OpenAI batch output and error files

every subcommand takes --nats URL (default ` + bus.DefaultURL + `)`

// runBatch is `switchyard batch`: OpenAI-format batch submission on top of
// the ordinary submit path, with its state in the sy_batches KV bucket.
func runBatch(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, batchUsage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "submit":
		return batchSubmit(ctx, args[1:], stdout)
	case "status":
		return batchStatus(ctx, args[1:], stdout, false)
	case "wait":
		return batchStatus(ctx, args[1:], stdout, true)
	case "results":
		return batchResults(ctx, args[1:], stdout)
	case "cancel":
		return batchCancel(ctx, args[1:], stdout)
	}
	fmt.Fprintln(os.Stderr, batchUsage)
	return fmt.Errorf("unknown batch subcommand %q", args[0])
}

// batchConn is what every batch subcommand needs.
type batchConn struct {
	nc *nats.Conn
	js jetstream.JetStream
	st *batch.Store
}

func (c *batchConn) Close() { c.nc.Drain() }

func dialBatch(ctx context.Context, url string, replicas int) (*batchConn, error) {
	nc, err := bus.Dial(ctx, url, "switchyard-batch", 5*time.Second)
	if err != nil {
		return nil, err
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	st, err := batch.OpenStore(ctx, js, batch.StoreOptions{Replicas: replicas})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &batchConn{nc: nc, js: js, st: st}, nil
}

// parseInterspersed lets the positional argument come before the flags
// (`batch submit FILE --tenant T`), which the flag package alone does not.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func batchSubmit(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("batch submit", flag.ContinueOnError)
	natsURL := fs.String("nats", bus.DefaultURL, "NATS server or cluster URL(s)")
	tenant := fs.String("tenant", "", "tenant to submit as (required)")
	id := fs.String("id", "", "batch id (default: derived from tenant and file content, so resubmitting dedupes)")
	deadline := fs.Duration("deadline", batch.DefaultDeadline, "completion window of every request (at most 24h)")
	maxTokens := fs.Int("default-max-tokens", 256, "max_tokens for lines that set none")
	replicas := fs.Int("kv-replicas", 1, "replicas of the sy_batches bucket when it is created (3 on a cluster)")
	quiet := fs.Bool("q", false, "no progress bar")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *tenant == "" {
		return fmt.Errorf("usage: switchyard batch submit FILE.jsonl --tenant T [--nats URL]")
	}
	content, err := os.ReadFile(pos[0])
	if err != nil {
		return fmt.Errorf("read batch file: %w", err)
	}
	c, err := dialBatch(ctx, *natsURL, *replicas)
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := client.New(c.nc, client.WithJSON())
	if err != nil {
		return err
	}
	var bar *batch.Progress
	sub := batch.Submission{
		Tenant: *tenant, Source: filepath.Base(pos[0]), Content: content, ID: *id,
		Options: batch.Options{Deadline: *deadline, DefaultMaxTokens: *maxTokens},
		Progress: func(acked, total int) {
			if bar == nil && !*quiet {
				bar = batch.NewProgress(os.Stderr, "publishing", total)
			}
			bar.Set(acked)
		},
	}
	rec, resumed, err := batch.Submit(ctx, c.st, cl, sub, time.Now())
	if bar != nil {
		bar.Done()
	}
	if err != nil {
		return err
	}
	switch {
	case resumed && rec.Published >= rec.Requests:
		fmt.Fprintf(os.Stderr, "batch %s was already submitted (%d requests); nothing published\n", rec.ID, rec.Requests)
	default:
		fmt.Fprintf(os.Stderr, "%d requests published, %d invalid lines (see `switchyard batch results %s --errors FILE`)\n", rec.Published, rec.Invalid, rec.ID)
	}
	fmt.Fprintln(stdout, rec.ID)
	return nil
}

func batchStatus(ctx context.Context, args []string, stdout io.Writer, follow bool) error {
	name := "status"
	if follow {
		name = "wait"
	}
	fs := flag.NewFlagSet("batch "+name, flag.ContinueOnError)
	natsURL := fs.String("nats", bus.DefaultURL, "NATS server or cluster URL(s)")
	asJSON := fs.Bool("json", false, "print the batch record as JSON")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long (0: until the batch deadline)")
	quiet := fs.Bool("q", false, "no progress bar")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("usage: switchyard batch %s ID [--nats URL]", name)
	}
	c, err := dialBatch(ctx, *natsURL, 1)
	if err != nil {
		return err
	}
	defer c.Close()
	var bar *batch.Progress
	var eta batch.ETA
	progress := func(u batch.Update) {
		if follow && !*quiet {
			if bar == nil {
				bar = batch.NewProgress(os.Stderr, "results", u.Total)
			}
			now := time.Now()
			eta.Observe(now, u.Done)
			bar.SetNote(batch.Line(now, u.Done, u.Total, u.Waiting, &eta))
			bar.Set(u.Done)
		}
	}
	wctx := ctx
	if follow {
		rec, err := c.st.Get(ctx, pos[0])
		if err != nil {
			return err
		}
		end := rec.Deadline
		if *timeout > 0 {
			end = time.Now().Add(*timeout)
		}
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	p, err := batch.Refresh(wctx, c.js, c.st, pos[0], follow, progress)
	if bar != nil {
		bar.Done()
	}
	if err != nil && !(follow && errors.Is(err, context.DeadlineExceeded) && p.Record.ID != "") {
		return err
	}
	r := p.Record
	if *asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
	} else {
		state := r.State(time.Now())
		fmt.Fprintf(stdout, "batch %s  tenant %s  %s\n  requests %d  completed %d  failed %d  pending %d  invalid lines %d\n  created %s  deadline %s\n",
			r.ID, r.Tenant, state, r.Requests, r.Completed, r.Failed, r.Requests-r.Completed-r.Failed, r.Invalid,
			r.Created.Format(time.RFC3339), r.Deadline.Format(time.RFC3339))
		if d := p.Waiting.Describe(time.Now()); d != "" {
			fmt.Fprintf(stdout, "  %s\n", d)
		}
	}
	if follow && !r.Finished() {
		return fmt.Errorf("batch %s not finished: %d of %d requests have results", r.ID, r.Completed+r.Failed, r.Requests)
	}
	return nil
}

func batchCancel(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("batch cancel", flag.ContinueOnError)
	natsURL := fs.String("nats", bus.DefaultURL, "NATS server or cluster URL(s)")
	tenant := fs.String("tenant", "", "tenant the batch belongs to (required)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *tenant == "" {
		return fmt.Errorf("usage: switchyard batch cancel ID --tenant T [--nats URL]")
	}
	c, err := dialBatch(ctx, *natsURL, 1)
	if err != nil {
		return err
	}
	defer c.Close()
	rec, sent, err := batch.Cancel(ctx, c.js, c.st, pos[0], *tenant, "batch cancelled", time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "batch %s %s: %d cancels sent, %d of %d requests already have results\n", rec.ID, rec.State(time.Now()), sent, rec.Completed+rec.Failed, rec.Requests)
	return nil
}

func batchResults(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("batch results", flag.ContinueOnError)
	natsURL := fs.String("nats", bus.DefaultURL, "NATS server or cluster URL(s)")
	outPath := fs.String("o", "", "output file (OpenAI batch output format; required)")
	errPath := fs.String("errors", "", "error file (OpenAI batch error format)")
	partial := fs.Bool("partial", false, "write what has finished; unfinished requests go to the error file as not_finished")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *outPath == "" {
		return fmt.Errorf("usage: switchyard batch results ID -o out.jsonl [--errors err.jsonl] [--nats URL]")
	}
	c, err := dialBatch(ctx, *natsURL, 1)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := batch.Refresh(ctx, c.js, c.st, pos[0], false, nil)
	if err != nil {
		return err
	}
	bad, err := c.st.LineErrors(ctx, p.Record)
	if err != nil {
		return err
	}
	// Write to temp files and rename, so a failed run never leaves a
	// truncated output file that looks complete.
	out, err := os.CreateTemp(filepath.Dir(*outPath), ".batch-out-*")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	var errFile *os.File
	var errW io.Writer
	if *errPath != "" {
		if errFile, err = os.CreateTemp(filepath.Dir(*errPath), ".batch-err-*"); err != nil {
			out.Close()
			return err
		}
		defer os.Remove(errFile.Name())
		errW = errFile
	}
	counts, werr := batch.WriteFiles(out, errW, p.Record.ID, p.Items, bad, p.Results, *partial)
	_ = out.Chmod(0o644)
	cerr := out.Close()
	if errFile != nil {
		if err := errFile.Close(); cerr == nil {
			cerr = err
		}
	}
	if werr != nil {
		return werr
	}
	if cerr != nil {
		return cerr
	}
	if err := os.Rename(out.Name(), *outPath); err != nil {
		return err
	}
	if errFile != nil {
		if err := os.Rename(errFile.Name(), *errPath); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%d lines to %s, %d to the error file", counts.Output, *outPath, counts.Errors)
	if *errPath == "" && counts.Errors > 0 {
		fmt.Fprint(stdout, " (not written: pass --errors FILE)")
	}
	fmt.Fprintln(stdout)
	return nil
}
