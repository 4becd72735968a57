package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/svc"
)

func TestMeasureReadSpeed(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := measureReadSpeed(big, 64<<20, 0)
	if err == nil {
		t.Fatalf("a zero budget timed a read: %+v", rs)
	}
	rs, err = measureReadSpeed(big, 64<<20, 5e9)
	if err != nil || rs.BytesPerSec <= 0 || !strings.Contains(rs.Source, "8 MB") {
		t.Fatalf("read speed of 8 MB: %+v, %v", rs, err)
	}
	if _, err := measureReadSpeed(small, 64<<20, 5e9); err == nil {
		t.Fatal("one byte timed as a read speed")
	}
	if _, err := measureReadSpeed(filepath.Join(dir, "none"), 64<<20, 5e9); err == nil {
		t.Fatal("a missing file timed as a read speed")
	}
}

// fakeOllama serves the native API a worker reads: tiny on disk with the
// given size, nothing loaded.
func fakeOllama(t *testing.T, size int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/version":
			fmt.Fprint(w, `{"version":"0.6.5"}`)
		case "/api/ps":
			fmt.Fprint(w, `{"models":[]}`)
		case "/api/tags":
			fmt.Fprintf(w, `{"models":[{"name":"tiny:latest","size":%d}]}`, size)
		case "/api/show":
			fmt.Fprint(w, `{"details":{"family":"llama"},"model_info":{"general.architecture":"llama","general.parameter_count":119360,
"llama.attention.head_count":4,"llama.attention.head_count_kv":2,"llama.block_count":2,"llama.context_length":2048,
"llama.embedding_length":64,"llama.feed_forward_length":128,"llama.vocab_size":354}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A cold model on an engine that loads on demand advertises its runner's
// start plus its size over the host's read speed, not the roofline's GPU
// cold start: 24 s for a 487 KB model made the router hold every request
// for it past its deadline (issue 31).
func TestColdLoadGuessFromSizeOnDisk(t *testing.T) {
	env := bustest.Start(t)
	rs := hostReadSpeed()
	t.Logf("host read speed %.0f MB/s (direct %v, %s)", rs.BytesPerSec/1e6, rs.Direct, rs.Source)
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"the tiny test model", 487_104},
		{"an 8B model at 4 bits", 4_900_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			engine := fakeOllama(t, tc.size)
			cfg := Config{ID: "eng-0", GPU: "cpu", Model: "tiny", Backend: "openai", OpenAIURL: engine.URL}
			cat, err := LearnServedModel(context.Background(), catalog.Default(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Catalog = cat
			sh, err := svc.New("worker", "eng-0", env.NC, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(sh, cfg)
			if err != nil {
				t.Fatal(err)
			}
			w.scrape(context.Background())
			hb := w.Heartbeat()
			if len(hb.Models) == 0 {
				t.Fatalf("no models in %+v", hb)
			}
			own := hb.Models[0]
			want := runnerStartSeconds + float64(tc.size)/rs.BytesPerSec
			roofline := w.replica.LoadSeconds(schemas.WeightCold)
			if own.State != schemas.WeightCold || own.LoadSeconds < want*0.999 || own.LoadSeconds > want*1.001 {
				t.Fatalf("own model %+v, want cold with load_s %.3f (roofline %.1f)", own, want, roofline)
			}
			if tc.size < 1<<20 && own.LoadSeconds > 1 {
				t.Fatalf("a %d-byte model guessed to load in %.2fs", tc.size, own.LoadSeconds)
			}
		})
	}
}
