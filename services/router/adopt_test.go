package router

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

// A dead peer's in-flight work is adopted even when the first scan for it
// fails: the live set counts as seen only once scanned. It used to be
// recorded before the scan, so the next view compared equal and the
// peer's dispatches were never adopted (issue 29).
func TestAdoptionRetriesAFailedScan(t *testing.T) {
	env := bustest.Start(t)
	sh, err := svc.New("router", "r1", env.NC, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		fails int // scans that fail before one succeeds
		views [][]string
	}{
		{"first scan succeeds", 0, [][]string{{"r1", "r2"}, {"r1"}}},
		{"the scan after the peer left fails once", 1, [][]string{{"r1", "r2"}, {"r1"}}},
		{"fails twice, a newer view meanwhile", 2, [][]string{{"r1", "r2"}, {"r1"}, {"r1", "r3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(sh, Config{Cost: perf.NewPredictor(catalog.Default()), ActiveActive: true})
			var mu sync.Mutex
			scans, failed := 0, 0
			scan := func(live []string) ([]schemas.Dispatch, error) {
				mu.Lock()
				defer mu.Unlock()
				scans++
				if scans == 1 {
					return nil, nil // the first view: nothing left behind by an earlier run
				}
				if failed < tc.fails {
					failed++
					return nil, errors.New("listing consumers: timeout")
				}
				return []schemas.Dispatch{{RouterID: "r2", Admitted: schemas.Admitted{Request: schemas.Request{ID: "orphan"}}}}, nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			views := make(chan []string)
			go r.adoptLoop(ctx, views, 20*time.Millisecond, scan)
			for _, v := range tc.views {
				views <- v
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				if _, ok := r.mine.Load("orphan"); ok {
					break
				}
				if time.Now().After(deadline) {
					mu.Lock()
					t.Fatalf("the dead peer's dispatch was never adopted (%d scans, %d failed)", scans, failed)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
