package traces

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// MooncakeBlockTokens is the block size of Mooncake's hash_ids.
const MooncakeBlockTokens = 512

// mooncakeRow is one line of a Mooncake trace.
type mooncakeRow struct {
	Timestamp    float64  `json:"timestamp"` // ms from trace start
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ReadOptions bound what a reader loads.
type ReadOptions struct {
	// Limit keeps only the first Limit rows (0 = all); tests use it to stay
	// fast.
	Limit int
	// Seed drives jitter and the tenant/priority rules.
	Seed int64
	// NoJitter keeps the trace's coarse timestamps as they are.
	NoJitter bool
}

// ReadMooncakeFile reads a Mooncake JSONL trace from path.
func ReadMooncakeFile(path string, o ReadOptions) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	defer f.Close()
	t, err := ReadMooncake(f, o)
	if err != nil {
		return nil, fmt.Errorf("traces: %s: %w", path, err)
	}
	t.Name = baseName(path)
	return t, nil
}

// ReadMooncake reads Mooncake JSONL: {timestamp (ms), input_length,
// output_length, hash_ids (512-token chained block ids)}. The coarse ids are
// expanded into 16-token chained hashes (tokens.ExpandBlocks) so prefix
// reuse is seen at the engine's block size.
//
// Mooncake's conversation timestamps are bucketed to ~3 s, so unless
// NoJitter is set each row is moved uniformly (seeded) within the gap to
// the next distinct timestamp; otherwise every bucket would arrive as one
// burst that real traffic does not have. The session key for the tenant
// rules is the first block id after the shared system-prompt block, which
// is shared by every turn of one conversation.
func ReadMooncake(r io.Reader, o ReadOptions) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var rows []mooncakeRow
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var row mooncakeRow
		if err := json.Unmarshal(b, &row); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if row.InputLength <= 0 {
			return nil, fmt.Errorf("line %d: input_length %d", line, row.InputLength)
		}
		if row.OutputLength < 1 {
			row.OutputLength = 1
		}
		rows = append(rows, row)
		if o.Limit > 0 && len(rows) >= o.Limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// A slice cut from the middle of a trace keeps the whole trace's
	// clock (its first line at 2,400 s, say); arrivals count from the
	// slice's own start, so --duration and --rate-scale mean the same on
	// a slice as on the whole trace.
	base := 0.0
	for i, row := range rows {
		if i == 0 || row.Timestamp < base {
			base = row.Timestamp
		}
	}
	for i := range rows {
		rows[i].Timestamp -= base
	}
	t := &Trace{Name: "mooncake", Requests: make([]Request, len(rows))}
	if base > 0 {
		t.Rules = append(t.Rules, fmt.Sprintf("mooncake: timestamps rebased to the slice's first (%.0f ms)", base))
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6d6f6f6e))
	keys := make([]uint64, len(rows))
	for i, row := range rows {
		at := time.Duration(row.Timestamp * float64(time.Millisecond))
		if !o.NoJitter {
			next := at
			for j := i + 1; j < len(rows); j++ {
				if rows[j].Timestamp > row.Timestamp {
					next = time.Duration(rows[j].Timestamp * float64(time.Millisecond))
					break
				}
			}
			if next > at {
				at += time.Duration(rng.Float64() * float64(next-at))
			}
		}
		t.Requests[i] = Request{
			ID:           fmt.Sprintf("mc-%06d", i),
			Arrival:      at,
			PromptTokens: row.InputLength,
			OutputTokens: row.OutputLength,
			BlockHashes:  tokens.ExpandBlocks(row.HashIDs, MooncakeBlockTokens, row.InputLength),
		}
		switch {
		case len(row.HashIDs) > 1:
			keys[i] = row.HashIDs[1]
		case len(row.HashIDs) == 1:
			keys[i] = row.HashIDs[0]
		default:
			keys[i] = uint64(i) | 1<<63
		}
	}
	sortByArrival(t, keys)
	if !o.NoJitter {
		t.Rules = append(t.Rules, "mooncake: 3 s timestamp buckets spread uniformly (seeded) up to the next distinct timestamp")
	}
	t.Rules = append(t.Rules, "mooncake: 512-token hash_ids expanded to chained 16-token block hashes; session key = hash_ids[1]")
	AssignBySession(t, o.Seed, func(i int) uint64 { return keys[i] })
	return t, nil
}

// sortByArrival orders requests by arrival (stable), permuting keys along.
func sortByArrival(t *Trace, keys []uint64) {
	idx := make([]int, len(t.Requests))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return t.Requests[idx[a]].Arrival < t.Requests[idx[b]].Arrival })
	reqs := make([]Request, len(idx))
	ks := make([]uint64, len(idx))
	for n, i := range idx {
		reqs[n] = t.Requests[i]
		ks[n] = keys[i]
	}
	t.Requests = reqs
	copy(keys, ks)
}

func baseName(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[i+1:]
		}
	}
	return path
}
