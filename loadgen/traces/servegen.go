package traces

// ServeGen (Xiang et al., "ServeGen: Workload Characterization and
// Generation of LLM Serving in Production", arXiv:2505.09999; data from
// github.com/alibaba/ServeGen, Apache-2.0) publishes per-client aggregates
// of Alibaba Bailian traffic rather than requests: for every client and
// 10-minute window its request rate, inter-arrival CV and the fitted
// inter-arrival distribution (Gamma or Weibull), and for every 6-hour
// window the client's token-length distribution. This file turns them back
// into requests the way ServeGen's own generator does (servegen/construct.py
// samples inter-arrival times from the fitted distribution and rescales
// them to the window's rate), so a day of production traffic — its diurnal
// shape, its per-tenant burstiness and its multi-tenant mix — can be
// replayed through the simulator.

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/tokens"
)

// ServeGenWindowSeconds is the width of a ServeGen rate window.
const ServeGenWindowSeconds = 600

// ServeGenLengthsFile is the length-statistics file the rates files sit
// beside in ../shared/traces (one file for every model).
const ServeGenLengthsFile = "servegen_client_length_stats.csv"

// ServeGenWindow is one client's arrival process over one rate window.
type ServeGenWindow struct {
	Client string
	Start  time.Duration
	// Rate is requests per second; CV the inter-arrival coefficient of
	// variation ServeGen measured (reported, not used: the fitted
	// distribution carries it).
	Rate, CV float64
	// Dist is "Gamma" or "Weibull" ("" = idle); Shape and Scale its
	// parameters as scipy takes them (gamma a and scale, weibull_min c and
	// scale).
	Dist         string
	Shape, Scale float64
}

// ServeGenPool is one model's client rate windows.
type ServeGenPool struct {
	Model   string
	Windows []ServeGenWindow
}

// ReadServeGenRates reads a servegen_<model>_client_rates.csv (header
// client_id,window_start_s,rate_rps,iat_cv,iat_dist,dist_shape,dist_scale).
func ReadServeGenRates(r io.Reader, model string) (ServeGenPool, error) {
	p := ServeGenPool{Model: model}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return p, fmt.Errorf("header: %w", err)
	}
	col, err := columns(head, "client_id", "window_start_s", "rate_rps", "iat_cv", "iat_dist", "dist_shape", "dist_scale")
	if err != nil {
		return p, err
	}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return p, fmt.Errorf("line %d: %w", line, err)
		}
		if len(rec) < len(head) {
			return p, fmt.Errorf("line %d: %d fields, want %d", line, len(rec), len(head))
		}
		var f [5]float64
		for k, name := range []string{"window_start_s", "rate_rps", "iat_cv", "dist_shape", "dist_scale"} {
			s := strings.TrimSpace(rec[col[name]])
			if s == "" {
				continue
			}
			if f[k], err = strconv.ParseFloat(s, 64); err != nil || math.IsNaN(f[k]) || math.IsInf(f[k], 0) || f[k] < 0 {
				return p, fmt.Errorf("line %d: %s %q is not a non-negative number", line, name, s)
			}
		}
		w := ServeGenWindow{Client: strings.TrimSpace(rec[col["client_id"]]), Start: time.Duration(f[0] * float64(time.Second)),
			Rate: f[1], CV: f[2], Dist: strings.TrimSpace(rec[col["iat_dist"]]), Shape: f[3], Scale: f[4]}
		switch w.Dist {
		case "":
		case "Gamma", "Weibull":
			if w.Rate > 0 && (w.Shape <= 0 || w.Scale <= 0) {
				return p, fmt.Errorf("line %d: %s with shape %g scale %g: both must be positive", line, w.Dist, w.Shape, w.Scale)
			}
		default:
			return p, fmt.Errorf("line %d: iat_dist %q: want Gamma, Weibull or empty", line, w.Dist)
		}
		if w.Client == "" {
			return p, fmt.Errorf("line %d: empty client_id", line)
		}
		p.Windows = append(p.Windows, w)
	}
	if len(p.Windows) == 0 {
		return p, errors.New("no rate windows")
	}
	return p, nil
}

// ServeGenQuantiles summarises one length distribution as the statistics
// file does.
type ServeGenQuantiles struct {
	Mean, P50, P90, P99, Max float64
	// lo and k are sample's fitted floor and exponent (fitted once, when
	// the statistics are read).
	lo, k  float64
	fitted bool
}

// ServeGenLengths holds per (model, client, 6-hour window) length
// statistics by field (input_tokens, output_tokens, text_tokens, ...).
type ServeGenLengths struct {
	// by model → client → windows in start order
	by map[string]map[string][]lengthWindow
}

type lengthWindow struct {
	start  time.Duration
	fields map[string]ServeGenQuantiles
}

// ReadServeGenLengths reads servegen_client_length_stats.csv (header
// model,client_id,window_start_s,field,mean,p50,p90,p99,max).
func ReadServeGenLengths(r io.Reader) (*ServeGenLengths, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col, err := columns(head, "model", "client_id", "window_start_s", "field", "mean", "p50", "p90", "p99", "max")
	if err != nil {
		return nil, err
	}
	l := &ServeGenLengths{by: map[string]map[string][]lengthWindow{}}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if len(rec) < len(head) {
			return nil, fmt.Errorf("line %d: %d fields, want %d", line, len(rec), len(head))
		}
		var f [6]float64
		for k, name := range []string{"window_start_s", "mean", "p50", "p90", "p99", "max"} {
			s := strings.TrimSpace(rec[col[name]])
			if f[k], err = strconv.ParseFloat(s, 64); err != nil || math.IsNaN(f[k]) || math.IsInf(f[k], 0) || f[k] < 0 {
				return nil, fmt.Errorf("line %d: %s %q is not a non-negative number", line, name, s)
			}
		}
		model, client, field := strings.TrimSpace(rec[col["model"]]), strings.TrimSpace(rec[col["client_id"]]), strings.TrimSpace(rec[col["field"]])
		if model == "" || client == "" || field == "" {
			return nil, fmt.Errorf("line %d: empty model, client_id or field", line)
		}
		byClient := l.by[model]
		if byClient == nil {
			byClient = map[string][]lengthWindow{}
			l.by[model] = byClient
		}
		start := time.Duration(f[0] * float64(time.Second))
		ws := byClient[client]
		k := sort.Search(len(ws), func(i int) bool { return ws[i].start >= start })
		if k == len(ws) || ws[k].start != start {
			ws = append(ws, lengthWindow{})
			copy(ws[k+1:], ws[k:])
			ws[k] = lengthWindow{start: start, fields: map[string]ServeGenQuantiles{}}
			byClient[client] = ws
		}
		q := ServeGenQuantiles{Mean: f[1], P50: f[2], P90: f[3], P99: f[4], Max: f[5]}
		if !(q.P50 <= q.P90 && q.P90 <= q.P99 && q.P99 <= q.Max) {
			return nil, fmt.Errorf("line %d: quantiles p50 %g p90 %g p99 %g max %g are not in order", line, q.P50, q.P90, q.P99, q.Max)
		}
		q.lo, q.k = q.fit()
		q.fitted = true
		ws[k].fields[field] = q
	}
	if len(l.by) == 0 {
		return nil, errors.New("no length statistics")
	}
	return l, nil
}

// Models lists the models with length statistics.
func (l *ServeGenLengths) Models() []string {
	var out []string
	for m := range l.by {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// window returns the statistics a request of client at t draws from: the
// client's 6-hour window holding t (the nearest when t is outside them),
// else — for a client ServeGen released no length data for — the same
// window of another client of the model, picked by a seeded hash.
func (l *ServeGenLengths) window(model, client string, t time.Duration, seed int64) (lengthWindow, bool) {
	byClient := l.by[model]
	if len(byClient) == 0 {
		return lengthWindow{}, false
	}
	ws, ok := byClient[client]
	if !ok {
		names := make([]string, 0, len(byClient))
		for c := range byClient {
			names = append(names, c)
		}
		sort.Strings(names)
		ws = byClient[names[int(Unit(seed, hashString(model+"/"+client))*float64(len(names)))]]
	}
	k := sort.Search(len(ws), func(i int) bool { return ws[i].start > t }) - 1
	return ws[max(k, 0)], true
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// sample draws one value from the quantile summary by inverting a
// piecewise CDF through (0, floor), (0.5, p50), (0.9, p90), (0.99, p99)
// and (1, max). Inside each segment above the median the value rises as
// s^k of the way through it (s the position in the segment), one k for
// all of them, and the floor and k are set so the distribution's mean is
// the published mean: first with linear segments (k = 1) and the floor
// free in [0, p50]; where no floor can match it, the floor is pinned at
// the nearer end and k bends the segments — convex (k > 1, the tail's
// mass near its lower quantile) for heavy-tailed lengths whose max is
// far above their p99, concave otherwise. The statistics are all the
// released data says about the shape.
func (q ServeGenQuantiles) sample(u float64) float64 {
	lo, k := q.lo, q.k
	if !q.fitted {
		lo, k = q.fit()
	}
	pts := [...]struct{ u, v float64 }{{0, lo}, {0.5, q.P50}, {0.9, q.P90}, {0.99, q.P99}, {1, q.Max}}
	for i := 1; i < len(pts); i++ {
		if u <= pts[i].u {
			a, b := pts[i-1], pts[i]
			s := (u - a.u) / (b.u - a.u)
			if i > 1 {
				s = math.Pow(s, k)
			}
			return a.v + (b.v-a.v)*s
		}
	}
	return q.Max
}

// fit returns the floor and the segment exponent sample uses.
func (q ServeGenQuantiles) fit() (lo, k float64) {
	// upper is the mean of the part above the median for exponent k:
	// a segment from a to b has mean a + (b − a)/(k + 1).
	upper := func(k float64) float64 {
		seg := func(w, a, b float64) float64 { return w * (a + (b-a)/(k+1)) }
		return seg(0.4, q.P50, q.P90) + seg(0.09, q.P90, q.P99) + seg(0.01, q.P99, q.Max)
	}
	// mean = 0.5·(lo + p50)/2 + upper(k)  →  lo = 4(mean − upper) − p50.
	lo = 4*(q.Mean-upper(1)) - q.P50
	if lo >= 0 && lo <= q.P50 {
		return lo, 1
	}
	lo = math.Max(0, math.Min(q.P50, lo))
	target := q.Mean - 0.25*(lo+q.P50)
	// upper is decreasing in k: bisect on log k over [1e-3, 1e3].
	a, b := math.Log(1e-3), math.Log(1e3)
	for range 60 {
		m := (a + b) / 2
		if upper(math.Exp(m)) > target {
			a = m
		} else {
			b = m
		}
	}
	return lo, math.Exp((a + b) / 2)
}

// ServeGenConfig shapes a generated ServeGen workload.
type ServeGenConfig struct {
	Seed int64
	// Start is the offset into the rate data to begin at and Duration how
	// much of it to generate (default 24 h, or less where the data ends).
	Start, Duration time.Duration
	// RateScale multiplies every client's rate (default 1): below 1 it thins
	// the workload and keeps its diurnal shape and per-client burstiness,
	// where Trace.Scale would compress the day into less time.
	RateScale float64
	// MaxRequests bounds the workload (default 5,000,000): a configuration
	// that would generate more is an error, not an out-of-memory crash.
	MaxRequests int
}

// DefaultServeGenMaxRequests is ServeGenConfig.MaxRequests' default.
const DefaultServeGenMaxRequests = 5_000_000

// ServeGen generates requests from the pools' rate windows with lengths
// from l: for each client and window, a renewal process whose
// inter-arrival times follow the window's fitted distribution rescaled to
// its rate, started at a uniform phase of its first gap; each request's
// input and output tokens drawn from the client's length statistics for
// the 6-hour window it falls in. Requests carry their pool's Model; the
// tenant is the ServeGen client (model-client), and the class and SLO come
// from the seeded tenant rules keyed by the client, so all of a client's
// traffic shares one class. No prefix data exists, so prompts have unique
// block hashes.
func ServeGen(pools []ServeGenPool, l *ServeGenLengths, cfg ServeGenConfig) (*Trace, error) {
	if len(pools) == 0 {
		return nil, errors.New("traces: servegen: no rate files")
	}
	if l == nil {
		return nil, errors.New("traces: servegen: no length statistics")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	end := cfg.Start + cfg.Duration
	// Expected requests first, so an oversized request fails before it
	// allocates.
	if err := checkServeGenSize(pools, l, cfg, end); err != nil {
		return nil, err
	}
	t := &Trace{Name: "servegen"}
	var names []string
	var keys []uint64
	for pi, p := range pools {
		names = append(names, p.Model)
		for wi, w := range p.Windows {
			if w.Dist == "" || w.Rate <= 0 || w.Start < cfg.Start || w.Start >= end {
				continue
			}
			if err := serveGenArrivals(t, &keys, p.Model, w, l, cfg, end, pi, wi); err != nil {
				return nil, err
			}
		}
	}
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("traces: servegen: no arrivals in [%v, %v)", cfg.Start, end)
	}
	sortByArrival(t, keys)
	uniqueServeGenPrompts(t)
	t.Name = "servegen-" + strings.Join(names, "+")
	t.Rules = append(t.Rules,
		fmt.Sprintf("servegen: arrivals generated (seed %d) from ServeGen's per-client 10-min windows %v–%v at %g× the published rates: each window's fitted Gamma/Weibull inter-arrival times, rescaled to its rate (as ServeGen's construct.py does), from a uniform phase of the first gap", cfg.Seed, cfg.Start, end, cfg.RateScale),
		"servegen: input and output tokens drawn from the client's 6-hour length statistics (inverse CDF through p50/p90/p99/max, its floor and segment curvature set to match the mean); multimodal input = text + image + audio + video tokens; clients with no released lengths borrow another client's of the same model, by seeded hash",
		"servegen: no prefix data, so every prompt has unique block hashes; the tenant is the ServeGen client, and its class comes from the tenant rules keyed by the client")
	// Classes by client: every request of a client shares one class, as a
	// tenant's traffic does.
	tenant := make([]string, len(t.Requests))
	for i := range t.Requests {
		tenant[i] = t.Requests[i].Tenant
	}
	AssignBySession(t, cfg.Seed, func(i int) uint64 { return keys[i] })
	for i := range t.Requests {
		t.Requests[i].Tenant = tenant[i]
	}
	return t, nil
}

// withDefaults fills the configuration's defaults and refuses a rate scale
// or start that cannot generate a workload.
func (cfg ServeGenConfig) withDefaults() (ServeGenConfig, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 24 * time.Hour
	}
	if cfg.RateScale == 0 {
		cfg.RateScale = 1
	}
	if cfg.RateScale < 0 || math.IsNaN(cfg.RateScale) || math.IsInf(cfg.RateScale, 0) {
		return cfg, fmt.Errorf("traces: servegen: rate scale %g: want a positive number", cfg.RateScale)
	}
	if cfg.Start < 0 {
		return cfg, fmt.Errorf("traces: servegen: start %v is negative", cfg.Start)
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultServeGenMaxRequests
	}
	return cfg, nil
}

// checkServeGenSize refuses pools whose model has no length statistics and
// a workload whose expected request count over [cfg.Start, end) is above
// cfg.MaxRequests.
func checkServeGenSize(pools []ServeGenPool, l *ServeGenLengths, cfg ServeGenConfig, end time.Duration) error {
	window := time.Duration(ServeGenWindowSeconds) * time.Second
	expect := 0.0
	for _, p := range pools {
		if _, ok := l.by[p.Model]; !ok {
			return fmt.Errorf("traces: servegen: no length statistics for model %q (have %v)", p.Model, l.Models())
		}
		for _, w := range p.Windows {
			if w.Dist != "" && w.Start >= cfg.Start && w.Start < end {
				expect += w.Rate * cfg.RateScale * window.Seconds()
			}
		}
	}
	if expect > float64(cfg.MaxRequests) {
		return fmt.Errorf("traces: servegen: about %.0f requests over %v at rate scale %g, over the limit of %d: lower the rate scale or the duration",
			expect, cfg.Duration, cfg.RateScale, cfg.MaxRequests)
	}
	return nil
}

// serveGenArrivals appends one client window's requests to t, and each
// one's client key to keys: a renewal process with the window's fitted
// inter-arrival distribution rescaled to its rate, from a uniform phase of
// its first gap. pi and wi, the pool's and the window's index, seed the
// window's own random stream.
func serveGenArrivals(t *Trace, keys *[]uint64, model string, w ServeGenWindow, l *ServeGenLengths, cfg ServeGenConfig, end time.Duration, pi, wi int) error {
	window := time.Duration(ServeGenWindowSeconds) * time.Second
	rate := w.Rate * cfg.RateScale
	// One stream per (pool, window row), so adding a pool or a window
	// never reshuffles the others' arrivals.
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(pi)<<40|uint64(wi)))
	mean := distMean(w)
	if mean <= 0 || math.IsNaN(mean) || math.IsInf(mean, 0) {
		return fmt.Errorf("traces: servegen: %s client %s at %v: %s(%g, %g) has no finite mean", model, w.Client, w.Start, w.Dist, w.Shape, w.Scale)
	}
	gap := func() time.Duration {
		return time.Duration(drawIAT(rng, w) / mean / rate * float64(time.Second))
	}
	tEnd := min(w.Start+window, end)
	at := w.Start + time.Duration(rng.Float64()*float64(gap()))
	ck := hashString(model + "/" + w.Client)
	for ; at < tEnd; at += gap() {
		lw, ok := l.window(model, w.Client, at, cfg.Seed)
		if !ok {
			return fmt.Errorf("traces: servegen: no length statistics for model %q", model)
		}
		in, out := requestLengths(lw, rng)
		t.Requests = append(t.Requests, Request{
			Arrival: at - cfg.Start, PromptTokens: in, OutputTokens: out,
			Tenant: model + "-" + w.Client, Model: model,
		})
		*keys = append(*keys, ck)
		if len(t.Requests) > cfg.MaxRequests {
			return fmt.Errorf("traces: servegen: more than %d requests: lower the rate scale or the duration", cfg.MaxRequests)
		}
	}
	return nil
}

// uniqueServeGenPrompts numbers the sorted requests and gives each prompt
// block hashes no other prompt shares: ServeGen publishes no prefix data.
func uniqueServeGenPrompts(t *Trace) {
	for i := range t.Requests {
		r := &t.Requests[i]
		r.ID = fmt.Sprintf("sg-%07d", i)
		coarse := make([]uint64, (r.PromptTokens+MooncakeBlockTokens-1)/MooncakeBlockTokens)
		for j := range coarse {
			coarse[j] = 1<<62 | uint64(i)<<16 | uint64(j)
		}
		r.BlockHashes = tokens.ExpandBlocks(coarse, MooncakeBlockTokens, r.PromptTokens)
	}
}

// requestLengths draws one request's input and output tokens.
func requestLengths(lw lengthWindow, rng *rand.Rand) (in, out int) {
	f := lw.fields
	if q, ok := f["input_tokens"]; ok {
		in = int(math.Round(q.sample(rng.Float64())))
	} else {
		for _, name := range []string{"text_tokens", "image_tokens", "audio_tokens", "video_tokens"} {
			if q, ok := f[name]; ok {
				in += int(math.Round(q.sample(rng.Float64())))
			}
		}
	}
	if q, ok := f["output_tokens"]; ok {
		out = int(math.Round(q.sample(rng.Float64())))
	}
	return max(in, 1), max(out, 1)
}

// distMean is the mean of the window's fitted inter-arrival distribution.
func distMean(w ServeGenWindow) float64 {
	if w.Dist == "Weibull" {
		return w.Scale * math.Gamma(1+1/w.Shape)
	}
	return w.Shape * w.Scale
}

// drawIAT draws one inter-arrival time from the window's distribution.
func drawIAT(rng *rand.Rand, w ServeGenWindow) float64 {
	if w.Dist == "Weibull" {
		return w.Scale * math.Pow(-math.Log(1-rng.Float64()), 1/w.Shape)
	}
	return w.Scale * gammaDraw(rng, w.Shape)
}

// gammaDraw samples Gamma(shape, 1) by Marsaglia and Tsang's method ("A
// simple method for generating gamma variables", ACM TOMS 2000), boosting
// shapes below one by U^{1/shape}.
func gammaDraw(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gammaDraw(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// columns maps the wanted header names to their indices.
func columns(head []string, want ...string) (map[string]int, error) {
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, w := range want {
		if _, ok := col[w]; !ok {
			return nil, fmt.Errorf("header %v: want columns %v", head, want)
		}
	}
	return col, nil
}

// ServeGenModel is the model name in a servegen_<model>_client_rates.csv
// file name ("" when the name has another form).
func ServeGenModel(path string) string {
	b := filepath.Base(path)
	if !strings.HasPrefix(b, "servegen_") || !strings.HasSuffix(b, "_client_rates.csv") {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(b, "servegen_"), "_client_rates.csv")
}

// ReadServeGenFiles generates a workload from one or more
// servegen_<model>_client_rates.csv files (comma-separated in paths, one
// model pool each) and the length statistics at lengthsPath (default: the
// ServeGenLengthsFile beside the first rates file).
func ReadServeGenFiles(paths, lengthsPath string, cfg ServeGenConfig) (*Trace, error) {
	var pools []ServeGenPool
	var first string
	for _, path := range strings.Split(paths, ",") {
		path = strings.TrimSpace(path)
		if path == "" {
			continue
		}
		if first == "" {
			first = path
		}
		model := ServeGenModel(path)
		if model == "" {
			return nil, fmt.Errorf("traces: servegen: %s: want a file named servegen_<model>_client_rates.csv (the model names the pool)", path)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("traces: servegen: %w", err)
		}
		p, err := ReadServeGenRates(f, model)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("traces: servegen: %s: %w", path, err)
		}
		pools = append(pools, p)
	}
	if len(pools) == 0 {
		return nil, errors.New("traces: servegen: no rates file given")
	}
	if lengthsPath == "" {
		lengthsPath = filepath.Join(filepath.Dir(first), ServeGenLengthsFile)
	}
	f, err := os.Open(lengthsPath)
	if err != nil {
		return nil, fmt.Errorf("traces: servegen: length statistics: %w", err)
	}
	defer f.Close()
	l, err := ReadServeGenLengths(f)
	if err != nil {
		return nil, fmt.Errorf("traces: servegen: %s: %w", lengthsPath, err)
	}
	return ServeGen(pools, l, cfg)
}
