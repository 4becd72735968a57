package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

// vLLM's sleep mode, the weight tiers a vLLM engine offers without a
// restart (issue 30). As vLLM documents it (docs/features/sleep_mode.md,
// "Online Serving"; vllm/entrypoints/serve/sleep/api_router.py), a server
// started with VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode answers
//
//	POST /sleep?level=1        weights offloaded to CPU RAM, KV cache discarded
//	POST /sleep?level=2        weights and KV cache discarded
//	POST /wake_up[?tags=...]   memory re-allocated (tags: weights, kv_cache)
//	POST /collective_rpc       {"method":"reload_weights"}: weights read again
//	GET  /is_sleeping          {"is_sleeping": bool}
//
// with an empty 200 for the POSTs. A level-1 wake is one /wake_up (the
// weights are copied back from host memory: the catalog's "host" tier); a
// level-2 wake is the documented sequence wake_up?tags=weights,
// collective_rpc reload_weights, wake_up?tags=kv_cache (the weights are read
// again from the checkpoint, which the first load left in the host's page
// cache: the "page_cache" tier). Without the dev mode or the flag these
// paths do not exist (404): ErrNoSleepMode.
//
// A sleep aborts the requests in flight (mode=abort, vLLM's default): the
// worker sleeps only an engine with nothing of its own running.
//
// UNTESTED AGAINST A LIVE vLLM: no vLLM runs here. sleep_test.go checks
// these calls against an httptest server that answers with the documented
// request and response shapes and enforces the documented level-2 order.
//
// SGLang has /release_memory_occupation and /resume_memory_occupation
// (with --enable-memory-saver), but its user documentation does not give
// their request shapes or what each frees, so they are not mapped: a
// warmth command on an SGLang worker is logged as not supported.

// ErrNoSleepMode is returned when the server has no sleep mode endpoints.
var ErrNoSleepMode = errors.New("openai: the server has no sleep mode endpoints (vLLM needs VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode)")

// vLLM's sleep levels.
const (
	// SleepOffload (level 1) offloads the weights to host memory.
	SleepOffload = 1
	// SleepDiscard (level 2) discards the weights; a wake reloads them.
	SleepDiscard = 2
)

// SleepTier is the weight tier a vLLM engine asleep at level sits in:
// host memory for level 1, the host's page cache (what the checkpoint's
// first read left) for level 2, hbm when awake (level 0).
func SleepTier(level int) string {
	switch level {
	case 0:
		return schemas.TierHBM
	case SleepOffload:
		return schemas.TierHost
	case SleepDiscard:
		return schemas.TierPageCache
	}
	return ""
}

// Sleep puts a vLLM engine to sleep at level (SleepOffload or
// SleepDiscard).
func (c *Client) Sleep(ctx context.Context, level int) error {
	if level != SleepOffload && level != SleepDiscard {
		return fmt.Errorf("openai: sleep level %d: want %d (offload to host memory) or %d (discard)", level, SleepOffload, SleepDiscard)
	}
	return c.devCall(ctx, http.MethodPost, fmt.Sprintf("/sleep?level=%d", level), nil, nil)
}

// Wake brings a vLLM engine asleep at level back to serving and returns
// how long that took: one /wake_up from level 1, the documented
// weights / reload_weights / kv_cache sequence from level 2.
func (c *Client) Wake(ctx context.Context, level int) (time.Duration, error) {
	start := time.Now()
	switch level {
	case SleepOffload:
		if err := c.devCall(ctx, http.MethodPost, "/wake_up", nil, nil); err != nil {
			return 0, err
		}
	case SleepDiscard:
		if err := c.devCall(ctx, http.MethodPost, "/wake_up?tags=weights", nil, nil); err != nil {
			return 0, err
		}
		if err := c.devCall(ctx, http.MethodPost, "/collective_rpc", map[string]any{"method": "reload_weights"}, nil); err != nil {
			return 0, fmt.Errorf("openai: reloading the weights after a level-2 sleep: %w", err)
		}
		if err := c.devCall(ctx, http.MethodPost, "/wake_up?tags=kv_cache", nil, nil); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("openai: wake from sleep level %d: want %d or %d", level, SleepOffload, SleepDiscard)
	}
	return time.Since(start), nil
}

// IsSleeping reads back whether the engine sleeps (GET /is_sleeping); vLLM
// says true until every sleeping memory tag is woken.
func (c *Client) IsSleeping(ctx context.Context) (bool, error) {
	var out struct {
		IsSleeping *bool `json:"is_sleeping"`
	}
	if err := c.devCall(ctx, http.MethodGet, "/is_sleeping", nil, &out); err != nil {
		return false, err
	}
	if out.IsSleeping == nil {
		return false, errors.New("openai: /is_sleeping: the answer has no is_sleeping field")
	}
	return *out.IsSleeping, nil
}

// devCall is one call to a vLLM dev-mode endpoint: a 404 means the server
// has no sleep mode, any other status but 200 is an error with the body.
func (c *Client) devCall(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return fmt.Errorf("openai: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%w (%s %s answered %s)", ErrNoSleepMode, method, path, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("openai: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("openai: %s: decoding the answer: %w", path, err)
	}
	return nil
}
