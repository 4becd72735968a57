package traces

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// azureTimeLayout is the Azure 2023 TIMESTAMP format (no zone, 7 digits).
const azureTimeLayout = "2006-01-02 15:04:05.9999999"

// ReadAzureFile reads an Azure LLM inference CSV from path.
func ReadAzureFile(path string, o ReadOptions) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	defer f.Close()
	t, err := ReadAzure(f, o)
	if err != nil {
		return nil, fmt.Errorf("traces: %s: %w", path, err)
	}
	t.Name = baseName(path)
	return t, nil
}

// ReadAzure reads the Azure LLM inference trace (TIMESTAMP, ContextTokens,
// GeneratedTokens). The trace carries no prefix information, so every
// prompt gets unique block hashes: no policy can find a cache hit that the
// data does not show. Each request is its own session for the tenant rules.
func ReadAzure(r io.Reader, o ReadOptions) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	ti, ok1 := col["TIMESTAMP"]
	ci, ok2 := col["ContextTokens"]
	gi, ok3 := col["GeneratedTokens"]
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("header %v: want TIMESTAMP, ContextTokens, GeneratedTokens", head)
	}
	t := &Trace{Name: "azure"}
	var t0 time.Time
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		ts, err := time.Parse(azureTimeLayout, strings.TrimSpace(rec[ti]))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		ctx, err1 := strconv.Atoi(strings.TrimSpace(rec[ci]))
		gen, err2 := strconv.Atoi(strings.TrimSpace(rec[gi]))
		if err1 != nil || err2 != nil || ctx <= 0 {
			return nil, fmt.Errorf("line %d: bad token counts %q %q", line, rec[ci], rec[gi])
		}
		if t0.IsZero() {
			t0 = ts
		}
		n := len(t.Requests)
		// Unique coarse ids per request (high bit set so they cannot meet
		// another reader's ids): no shared prefixes.
		coarse := make([]uint64, (ctx+MooncakeBlockTokens-1)/MooncakeBlockTokens)
		for j := range coarse {
			coarse[j] = 1<<63 | uint64(n)<<16 | uint64(j)
		}
		t.Requests = append(t.Requests, Request{
			ID:           fmt.Sprintf("az-%06d", n),
			Arrival:      ts.Sub(t0),
			PromptTokens: ctx,
			OutputTokens: max(gen, 1),
			BlockHashes:  tokens.ExpandBlocks(coarse, MooncakeBlockTokens, ctx),
		})
		if o.Limit > 0 && len(t.Requests) >= o.Limit {
			break
		}
	}
	keys := make([]uint64, len(t.Requests))
	for i := range keys {
		keys[i] = uint64(i)
	}
	sortByArrival(t, keys)
	t.Rules = append(t.Rules, "azure: no prefix data in the trace, so every prompt has unique block hashes; each request is its own session")
	AssignBySession(t, o.Seed, func(i int) uint64 { return keys[i] })
	return t, nil
}
