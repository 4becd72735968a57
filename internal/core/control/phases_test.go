package control

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/engine"
	"github.com/switchyard-ai/switchyard/internal/core/perf"
	"github.com/switchyard-ai/switchyard/internal/core/placement"
	"github.com/switchyard-ai/switchyard/schemas"
)

func replica(t *testing.T, gpu string) perf.Replica {
	t.Helper()
	rep, err := perf.NewReplica(nil, gpu, model, "bf16", 1)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestPrefillCapacityKeepsTTFTInTheEngine runs a prefill-only engine open
// loop, Poisson arrivals of a long-tailed 12k-token mix (Mooncake's
// conversation shape) at the rate PrefillCapacity plans for an H100, and
// checks the mean TTFT it measures against the target the planned load was
// solved for: within the target (the model is a mean, so the engine's
// mean is what it must hold), and not far below it (a model that planned a
// half-idle replica would pass the first check too).
func TestPrefillCapacityKeepsTTFTInTheEngine(t *testing.T) {
	rep := replica(t, "h100")
	prompts, _, mix := longPromptMix(3000, 12400, 350, 5)
	tg := placement.DefaultTargets[schemas.PriorityCritical]
	// The moments Recent measures.
	for _, p := range prompts {
		l := float64(p)
		mix.PromptTokensCubed += l * l * l / float64(len(prompts))
		mix.PromptTokensFourth += l * l * l * l / float64(len(prompts))
	}
	pc := PrefillCapacity(rep, mix, tg)
	lognormal := mix
	lognormal.PromptTokensCubed, lognormal.PromptTokensFourth = 0, 0
	if ln := PrefillCapacity(rep, lognormal, tg); ln.TokensPerSec >= pc.TokensPerSec {
		t.Errorf("the lognormal's moments plan %.0f tokens/s, the measured %.0f: want the lognormal's tail conservative", ln.TokensPerSec, pc.TokensPerSec)
	} else {
		t.Logf("without measured third and fourth moments (a lognormal's): %.0f tokens/s (%.0f%%)", ln.TokensPerSec, 100*ln.Utilization)
	}
	rate := pc.RequestsPerSec(Uncached(mix))
	if pc.Utilization <= minPrefillUtilization || pc.Utilization >= 1 {
		t.Fatalf("planned utilization %.2f, want inside (%.2f, 1)", pc.Utilization, minPrefillUtilization)
	}
	e, err := engine.New(engine.Config{Replica: rep, CriticalStepTime: -1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	now, next := t0, t0
	sent, waitSum, n, over := 0, 0.0, 0, 0
	const warm = 200
	for n < len(prompts)-warm {
		for sent < len(prompts) && !next.After(now) {
			if err := e.Add(engine.Sequence{ID: fmt.Sprint(sent), PromptTokens: prompts[sent], MaxTokens: 350, Arrival: next, PrefillOnly: true}); err != nil {
				t.Fatal(err)
			}
			sent++
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
		st := e.Step(now)
		if st.Duration == 0 && len(st.Finished) == 0 {
			if sent == len(prompts) {
				break
			}
			now = next
			continue
		}
		now = now.Add(st.Duration)
		for _, f := range st.Finished {
			e.ReleaseKV(f.ID)
			var k int
			fmt.Sscan(f.ID, &k)
			if k < warm {
				continue
			}
			ttft := f.FirstTokenAt.Sub(f.Arrival).Seconds()
			waitSum += ttft
			n++
			if ttft > (tg.TTFTBase + time.Duration(prompts[k])*tg.PerPromptToken).Seconds() {
				over++
			}
		}
	}
	mean := waitSum / float64(n)
	// The target of the mean request, against which the planned load's
	// mean TTFT is solved: the slack is the binding prompt's.
	target := (tg.TTFTBase + time.Duration(mix.PromptTokens)*tg.PerPromptToken).Seconds()
	t.Logf("h100 prefill, %.0f-token mean prompt (rms %.0f): saturated %.0f tokens/s, planned %.0f (%.0f%%, %.3f req/s); engine mean TTFT %.2fs against the mean prompt's %.2fs target; %.1f%% of requests over their own target",
		mix.PromptTokens, math.Sqrt(mix.PromptTokensSquared), pc.Saturated, pc.TokensPerSec, 100*pc.Utilization, rate, mean, target, 100*float64(over)/float64(n))
	if mean > target {
		t.Errorf("mean TTFT %.2fs at the planned load, over the %.2fs target", mean, target)
	}
	if mean < target/4 {
		t.Errorf("mean TTFT %.2fs at the planned load is under a quarter of the %.2fs target: the load is planned far too low", mean, target)
	}
}

// TestDecodeCapacityIsTheLargestBatchWithinTPOT: the decode batch keeps
// the step within the target and one more sequence would not.
func TestDecodeCapacityIsTheLargestBatchWithinTPOT(t *testing.T) {
	for _, gpu := range []string{"h100", "a100-80g"} {
		rep := replica(t, gpu)
		mix := Mix{PromptTokens: 12400, OutputTokens: 350}
		const tpot = 50 * time.Millisecond
		dc := DecodeCapacity(rep, mix, tpot)
		ctx := int(mix.PromptTokens + mix.OutputTokens/2)
		if s := rep.DecodeStepSeconds(dc.Batch, ctx); s > tpot.Seconds() {
			t.Errorf("%s: batch %d steps %.1f ms, over the %v target", gpu, dc.Batch, 1000*s, tpot)
		}
		kvCap := rep.KVBlocks(1, perf.DefaultMemUtil) / ctx
		if dc.Batch < min(engine.DefaultMaxBatch, kvCap) && rep.DecodeStepSeconds(dc.Batch+1, ctx) <= tpot.Seconds() {
			t.Errorf("%s: batch %d is not the largest within %v", gpu, dc.Batch, tpot)
		}
		t.Logf("%s decode, 12.4k in / 350 out: batch %d (KV holds %d), %.0f tokens/s, %.3f req/s", gpu, dc.Batch, kvCap, dc.TokensPerSec, dc.RequestsPerSec(mix.OutputTokens))
	}
}

// TestCachedPromptsNeedLessPrefill: the prefill planned per replica is in
// uncached tokens, so a mix whose prompts are mostly cached is served by
// fewer prefill replicas for the same requests.
func TestCachedPromptsNeedLessPrefill(t *testing.T) {
	rep := replica(t, "h100")
	tg := placement.DefaultTargets[schemas.PriorityCritical]
	cold := Mix{PromptTokens: 12400, OutputTokens: 350, PromptTokensSquared: 20500 * 20500}
	warm := cold
	warm.CachedTokens = 9000
	a, b := PrefillCapacity(rep, cold, tg), PrefillCapacity(rep, warm, tg)
	ra, rb := a.RequestsPerSec(Uncached(cold)), b.RequestsPerSec(Uncached(warm))
	t.Logf("cold %.3f req/s (%.0f tok/s), 9k of 12.4k cached %.3f req/s (%.0f tok/s)", ra, a.TokensPerSec, rb, b.TokensPerSec)
	if rb <= 2*ra {
		t.Errorf("with 73%% of each prompt cached a replica prefills %.3f req/s, uncached %.3f: want well over twice", rb, ra)
	}
}

// phaseFleet is a prefill pool of h100s and a decode pool of a100s, as
// `--gpus h100:1@prefill,a100-80g:1@decode` builds it.
func phaseFleet(t *testing.T) *Controller {
	t.Helper()
	c, err := New(Config{Pools: []Pool{
		{GPU: "h100", Model: model, Min: 1, Max: 32, Role: schemas.RolePrefill},
		{GPU: "a100-80g", Model: model, Min: 1, Max: 32, Role: schemas.RoleDecode},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func roleHB(id, gpu, role string, running int, completed uint64) schemas.Heartbeat {
	return schemas.Heartbeat{WorkerID: id, GPU: gpu, Role: role, Link: "ib-ndr", Running: running, CompletedTotal: completed,
		Models: []schemas.ModelState{{Name: model, State: schemas.WeightHot}}}
}

// runPhases drives a prefill and a decode pool for n intervals at rate
// requests a second, completed at the decode worker (the prefill worker's
// completions are left uncounted, as the simulated worker sends them), and
// returns the last decision.
func runPhases(t *testing.T, c *Controller, mix Mix, rate float64, n int) Decision {
	t.Helper()
	var d Decision
	done := 0.0
	for i := range n {
		now := t0.Add(time.Duration(i) * 2 * time.Second)
		done += rate * 2
		in := Inputs{Now: now, Mix: mix, Queued: map[string]int{}, Workers: []schemas.Heartbeat{
			roleHB("h100-00", "h100", schemas.RolePrefill, 2, 0),
			roleHB("a100-80g-00", "a100-80g", schemas.RoleDecode, 8, uint64(done)),
		}}
		d = c.Decide(in)
	}
	return d
}

// TestPhasePoolsSizedSeparately: at one request rate, a prefill pool
// sized by the uncached tokens and a decode pool by the output tokens
// move apart as the mix does — more of each prompt uncached asks for more
// prefill replicas and leaves the decode pool as it was; longer answers
// ask for more decode replicas and leave prefill as it was.
func TestPhasePoolsSizedSeparately(t *testing.T) {
	pre, dec := RolePoolKey("h100", model, schemas.RolePrefill), RolePoolKey("a100-80g", model, schemas.RoleDecode)
	base := Mix{PromptTokens: 12400, OutputTokens: 350, PromptTokensSquared: 20500 * 20500, CachedTokens: 9000}
	cold := base
	cold.CachedTokens = 0
	long := base
	long.OutputTokens = 1400
	const rate, n = 3.0, 300
	dBase := runPhases(t, phaseFleet(t), base, rate, n)
	dCold := runPhases(t, phaseFleet(t), cold, rate, n)
	dLong := runPhases(t, phaseFleet(t), long, rate, n)
	for _, x := range []struct {
		name string
		d    Decision
	}{{"9k of 12.4k cached, 350 out", dBase}, {"nothing cached", dCold}, {"1,400 out", dLong}} {
		for _, rd := range x.d.Replicas {
			t.Logf("%s: %s raw %d (%.2f req/s, %.0f tokens/s; %.0f tokens/s a replica)", x.name, rd.Pool, rd.Raw, rd.ArrivalRate, rd.TokenRate, rd.TokenCapacity)
		}
	}
	raw := func(d Decision, key string) int {
		for _, rd := range d.Replicas {
			if rd.Pool == key {
				if rd.Role == "" || rd.TokenCapacity <= 0 {
					t.Errorf("%s: no role or token capacity on its decision: %+v", key, rd)
				}
				return rd.Raw
			}
		}
		t.Fatalf("no decision for %s", key)
		return 0
	}
	if a, b := raw(dBase, pre), raw(dCold, pre); b <= a {
		t.Errorf("prefill pool: %d replicas with 73%% of prompts cached, %d with none: want more uncached", a, b)
	}
	if a, b := raw(dBase, dec), raw(dCold, dec); a != b {
		t.Errorf("decode pool: %d replicas with prompts cached, %d without: the cache is the prefill's, want the same", a, b)
	}
	if a, b := raw(dBase, dec), raw(dLong, dec); b <= a {
		t.Errorf("decode pool: %d replicas at 350 tokens out, %d at 1,400: want more", a, b)
	}
	if a, b := raw(dBase, pre), raw(dLong, pre); a != b {
		t.Errorf("prefill pool: %d replicas at 350 tokens out, %d at 1,400: want the same", a, b)
	}
	if r := dCold.Replicas[0].ArrivalRate; math.Abs(r-rate) > 0.2*rate {
		t.Errorf("prefill pool measured %.2f req/s from the decode completions, want about %.1f", r, rate)
	}
}

// TestRolePoolKeys: a prefill and a decode pool of one GPU and model are
// two pools; a worker whose role has no pool of its own (one the
// controller turned) stays in its GPU × model pool.
func TestRolePoolKeys(t *testing.T) {
	if _, err := New(Config{Pools: []Pool{
		{GPU: "h100", Model: model, Min: 1, Max: 4, Role: schemas.RolePrefill},
		{GPU: "h100", Model: model, Min: 1, Max: 4, Role: schemas.RoleDecode},
		{GPU: "h100", Model: model, Min: 1, Max: 4},
	}}); err != nil {
		t.Fatal(err)
	}
	plain := PoolKey("h100", model)
	if k := (Pool{GPU: "h100", Model: model, Role: schemas.RoleBoth}).Key(); k != plain {
		t.Errorf("a role-both pool is keyed %q, want %q", k, plain)
	}
	hb := roleHB("w", "h100", schemas.RolePrefill, 0, 0)
	only := func(keys ...string) func(string) bool {
		return func(k string) bool { return strings.Contains(strings.Join(keys, " "), k) }
	}
	if k := HeartbeatPool(&hb, only(plain, plain+":prefill")); k != plain+":prefill" {
		t.Errorf("prefill worker beside a prefill pool: %q", k)
	}
	if k := HeartbeatPool(&hb, only(plain)); k != plain {
		t.Errorf("prefill worker with only a pool of whole requests: %q, want %q", k, plain)
	}
}

// TestRoleFreePoolsIgnoreTheCache: a pool of whole requests is sized as
// before whatever the mix says of the cache (its sizing has no phase).
func TestRoleFreePoolsIgnoreTheCache(t *testing.T) {
	run := func(cached float64) Decision {
		c, err := New(Config{Pools: []Pool{{GPU: "h100", Model: model, Min: 1, Max: 32}}})
		if err != nil {
			t.Fatal(err)
		}
		var d Decision
		for i := range 60 {
			d = c.Decide(Inputs{Now: t0.Add(time.Duration(i) * 2 * time.Second), Queued: map[string]int{},
				Mix:     Mix{PromptTokens: 4000, OutputTokens: 300, CachedTokens: cached},
				Workers: []schemas.Heartbeat{roleHB("h100-00", "h100", "", 4, uint64(i*6))}})
		}
		return d
	}
	a, b := run(0), run(3000)
	if a.Replicas[0].Raw != b.Replicas[0].Raw || a.Replicas[0].Reason != b.Replicas[0].Reason {
		t.Errorf("a pool without a role sized %d with nothing cached, %d with 3k cached: want the same", a.Replicas[0].Raw, b.Replicas[0].Raw)
	}
}

// TestRoleChangeFollowsTheUncachedShare: with AssignRoles, a pool of
// whole requests turns one worker to prefill once the uncached prompts
// are long enough to split, with its reason, waits out the dwell before
// the next, and turns them back when the prompts are cached again.
func TestRoleChangeFollowsTheUncachedShare(t *testing.T) {
	c, err := New(Config{AssignRoles: true, Pools: []Pool{{GPU: "h100", Model: model, Min: 1, Max: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	ids := []string{"h100-00", "h100-01", "h100-02", "h100-03"}
	step := func(i int, mix Mix) Decision {
		var ws []schemas.Heartbeat
		for k, id := range ids {
			ws = append(ws, roleHB(id, "h100", roles[id], k, uint64(i)))
		}
		d := c.Decide(Inputs{Now: t0.Add(time.Duration(i) * 2 * time.Second), Mix: mix, Queued: map[string]int{}, Workers: ws})
		for _, r := range d.Roles {
			roles[r.Worker] = r.Role
		}
		return d
	}
	count := func() (n int) {
		for _, r := range roles {
			if r == schemas.RolePrefill {
				n++
			}
		}
		return n
	}
	short := Mix{PromptTokens: 12400, OutputTokens: 350, CachedTokens: 12000}
	long := Mix{PromptTokens: 12400, OutputTokens: 350, PromptTokensSquared: 20500 * 20500}
	for i := range 10 {
		if d := step(i, short); len(d.Roles) > 0 {
			t.Fatalf("400 uncached tokens a request turned %+v", d.Roles)
		}
	}
	d := step(10, long)
	if len(d.Roles) != 1 || d.Roles[0].Role != schemas.RolePrefill || d.Roles[0].Worker != "h100-00" {
		t.Fatalf("long uncached prompts: roles %+v, want h100-00 (the least loaded) to prefill", d.Roles)
	}
	t.Logf("%s", d.Roles[0].Reason)
	var ch *Change
	for i := range d.Changes {
		if d.Changes[i].Kind == KindRole {
			ch = &d.Changes[i]
		}
	}
	if ch == nil || ch.From != schemas.RoleBoth || ch.To != schemas.RolePrefill || !strings.Contains(ch.Reason, "uncached") {
		t.Errorf("role change event: %+v", ch)
	}
	if d := step(11, long); len(d.Roles) != 0 {
		t.Errorf("a second change within the dwell: %+v", d.Roles)
	}
	for i := 12; i < 200; i++ {
		step(i, long)
	}
	if n := count(); n < 1 || n > 3 {
		t.Errorf("%d of 4 workers prefill on long prompts, want 1..3", n)
	}
	for i := 200; i < 400; i++ {
		d := step(i, short)
		for _, b := range d.Budgets {
			if roles[b.Worker] == schemas.RolePrefill {
				t.Errorf("budget for prefill worker %s", b.Worker)
			}
		}
	}
	if n := count(); n != 0 {
		t.Errorf("%d workers still prefill once the prompts are cached again", n)
	}
}

// TestNoRoleChangesByDefault: without AssignRoles the controller leaves
// roles alone however long the prompts.
func TestNoRoleChangesByDefault(t *testing.T) {
	c, err := New(Config{Pools: []Pool{{GPU: "h100", Model: model, Min: 1, Max: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		d := c.Decide(Inputs{Now: t0.Add(time.Duration(i) * 2 * time.Second), Queued: map[string]int{},
			Mix:     Mix{PromptTokens: 12400, OutputTokens: 350},
			Workers: []schemas.Heartbeat{roleHB("a", "h100", "", 1, 0), roleHB("b", "h100", "", 1, 0)}})
		if len(d.Roles) > 0 {
			t.Fatalf("roles changed without AssignRoles: %+v", d.Roles)
		}
	}
}
