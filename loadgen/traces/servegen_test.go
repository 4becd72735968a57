package traces

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/schemas"
)

const sgDir = "testdata/"

func readSG(t *testing.T, cfg ServeGenConfig, models ...string) *Trace {
	t.Helper()
	var paths []string
	for _, m := range models {
		paths = append(paths, sgDir+"servegen_"+m+"_client_rates.csv")
	}
	tr, err := ReadServeGenFiles(strings.Join(paths, ","), "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The generated arrivals follow the published per-window rates: over every
// hour of the day, the count is the sum of rate × 600 s of the windows in
// it, within Poisson-scale noise (the fitted distributions are burstier
// than Poisson, so the band is wide, but a reader that ignored the rate or
// the rescaling would be off by far more).
func TestServeGenFollowsRates(t *testing.T) {
	f, err := os.Open(sgDir + "servegen_deepseek-r1_client_rates.csv")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := ReadServeGenRates(f, "deepseek-r1")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	const scale = 0.2
	tr := readSG(t, ServeGenConfig{Seed: 7, RateScale: scale}, "deepseek-r1")
	var want, got [24]float64
	for _, w := range pool.Windows {
		if w.Dist != "" {
			want[int(w.Start.Hours())] += w.Rate * scale * ServeGenWindowSeconds
		}
	}
	for _, r := range tr.Requests {
		got[int(r.Arrival.Hours())]++
		if r.Model != "deepseek-r1" || !strings.HasPrefix(r.Tenant, "deepseek-r1-") {
			t.Fatalf("request %s: model %q tenant %q", r.ID, r.Model, r.Tenant)
		}
	}
	var lo, hi float64 = math.Inf(1), 0
	for h := range want {
		lo, hi = math.Min(lo, want[h]), math.Max(hi, want[h])
		// Quiet hours of a few heavy-tailed windows (CV up to 8) are
		// legitimately far off; busy ones average out.
		if want[h] < 1000 {
			continue
		}
		if rel := math.Abs(got[h]-want[h]) / want[h]; rel > 0.15 {
			t.Errorf("hour %d: %v arrivals, the rates give %.0f (%.0f%% off)", h, got[h], want[h], rel*100)
		}
	}
	// The data's diurnal swing survives generation.
	if hi < 2*lo {
		t.Fatalf("hourly expected counts %v..%v: the slice should carry a diurnal swing", lo, hi)
	}
	if tr.Span() < 23*time.Hour {
		t.Fatalf("span %v, want the whole day", tr.Span())
	}
}

// Inter-arrival burstiness per window matches the CV ServeGen measured:
// one client, one busy window, at full rate.
func TestServeGenBurstiness(t *testing.T) {
	rates := "client_id,window_start_s,rate_rps,iat_cv,iat_dist,dist_shape,dist_scale\n" +
		"a,0,5,2.0,Gamma,0.25,4\n" + // CV of Gamma is 1/sqrt(shape) = 2
		"b,0,5,0.5,Weibull,2.1,1\n" // Weibull c=2.1 has CV ≈ 0.5
	lengths := "model,client_id,window_start_s,field,mean,p50,p90,p99,max\n" +
		"m,a,0,input_tokens,100,100,100,100,100\nm,a,0,output_tokens,10,10,10,10,10\n" +
		"m,b,0,input_tokens,100,100,100,100,100\nm,b,0,output_tokens,10,10,10,10,10\n"
	pool, err := ReadServeGenRates(strings.NewReader(rates), "m")
	if err != nil {
		t.Fatal(err)
	}
	l, err := ReadServeGenLengths(strings.NewReader(lengths))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		client string
		cv     float64
	}{{"m-a", 2.0}, {"m-b", 0.5}} {
		var last time.Duration = -1
		var gaps []float64
		n := 0
		for seed := int64(1); seed <= 8; seed++ {
			tr, err := ServeGen([]ServeGenPool{pool}, l, ServeGenConfig{Seed: seed, Duration: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			last = -1
			for _, r := range tr.Requests {
				if r.Tenant != tc.client {
					continue
				}
				n++
				if last >= 0 {
					gaps = append(gaps, (r.Arrival - last).Seconds())
				}
				last = r.Arrival
			}
		}
		mean, sq := 0.0, 0.0
		for _, g := range gaps {
			mean += g
		}
		mean /= float64(len(gaps))
		for _, g := range gaps {
			sq += (g - mean) * (g - mean)
		}
		cv := math.Sqrt(sq/float64(len(gaps)-1)) / mean
		if rate := float64(n) / 8 / 600; math.Abs(rate-5)/5 > 0.15 {
			t.Errorf("%s: %.2f req/s, want 5", tc.client, rate)
		}
		if math.Abs(cv-tc.cv)/tc.cv > 0.2 {
			t.Errorf("%s: inter-arrival CV %.2f, want %.2f", tc.client, cv, tc.cv)
		}
	}
}

// Lengths come from the client's statistics: the sample mean and median
// land near the published ones, and multimodal prompts sum their parts.
func TestServeGenLengths(t *testing.T) {
	tr := readSG(t, ServeGenConfig{Seed: 3, Duration: 6 * time.Hour, RateScale: 0.5}, "deepseek-r1", "mm-image")
	if !strings.Contains(tr.Name, "deepseek-r1+mm-image") {
		t.Fatalf("name %q", tr.Name)
	}
	f, err := os.Open(sgDir + ServeGenLengthsFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ReadServeGenLengths(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	type acc struct{ in, out, n float64 }
	by := map[string]*acc{}
	models := map[string]int{}
	for _, r := range tr.Requests {
		models[r.Model]++
		a := by[r.Tenant]
		if a == nil {
			a = &acc{}
			by[r.Tenant] = a
		}
		a.in += float64(r.PromptTokens)
		a.out += float64(r.OutputTokens)
		a.n++
		if r.Priority == "" || r.TTFTTarget <= 0 || len(r.BlockHashes) != r.PromptTokens/16 {
			t.Fatalf("request %+v lacks class, SLO or blocks", r)
		}
	}
	if models["deepseek-r1"] == 0 || models["mm-image"] == 0 {
		t.Fatalf("models %v: want both pools", models)
	}
	for _, tc := range []struct{ model, client string }{{"deepseek-r1", "35"}, {"mm-image", "12"}} {
		a := by[tc.model+"-"+tc.client]
		if a == nil || a.n < 500 {
			t.Fatalf("%s client %s: too few requests %+v", tc.model, tc.client, a)
		}
		lw, _ := l.window(tc.model, tc.client, 0, 0)
		wantIn := lw.fields["input_tokens"].Mean
		if tc.model == "mm-image" {
			wantIn = lw.fields["text_tokens"].Mean + lw.fields["image_tokens"].Mean + lw.fields["audio_tokens"].Mean + lw.fields["video_tokens"].Mean
		}
		wantOut := lw.fields["output_tokens"].Mean
		for _, c := range []struct {
			what      string
			got, want float64
		}{{"input", a.in / a.n, wantIn}, {"output", a.out / a.n, wantOut}} {
			if math.Abs(c.got-c.want)/c.want > 0.15 {
				t.Errorf("%s %s: mean %s %.0f, statistics say %.0f", tc.model, tc.client, c.what, c.got, c.want)
			}
		}
	}
}

func TestServeGenQuantileSample(t *testing.T) {
	for _, q := range []ServeGenQuantiles{
		{Mean: 320, P50: 200, P90: 600, P99: 1200, Max: 2000},
		// Heavy-tailed (deepseek-r1 client 35's input): linear segments
		// would put the mean near 90; the exponent bends them to 51.8.
		{Mean: 51.8, P50: 21, P90: 103, P99: 511, Max: 7038},
		// Mean above what linear segments reach with the floor at p50.
		{Mean: 850, P50: 800, P90: 900, P99: 1000, Max: 1100},
	} {
		sum, n := 0.0, 100000
		var below int
		for i := 0; i < n; i++ {
			v := q.sample((float64(i) + 0.5) / float64(n))
			sum += v
			if v <= q.P90 {
				below++
			}
			if v < 0 || v > q.Max {
				t.Fatalf("%+v: sample %v outside [0, max]", q, v)
			}
		}
		if m := sum / float64(n); math.Abs(m-q.Mean) > 0.01*q.Mean {
			t.Errorf("%+v: mean %.1f, want %.1f", q, m, q.Mean)
		}
		if f := float64(below) / float64(n); math.Abs(f-0.9) > 0.001 {
			t.Errorf("%+v: P(v ≤ p90) = %.4f", q, f)
		}
	}
}

func TestServeGenDeterministic(t *testing.T) {
	cfg := ServeGenConfig{Seed: 5, Duration: time.Hour, RateScale: 0.3}
	a, b := readSG(t, cfg, "mm-image"), readSG(t, cfg, "mm-image")
	if len(a.Requests) != len(b.Requests) || len(a.Requests) == 0 {
		t.Fatalf("%d vs %d requests", len(a.Requests), len(b.Requests))
	}
	for i := range a.Requests {
		x, y := a.Requests[i], b.Requests[i]
		if x.Arrival != y.Arrival || x.PromptTokens != y.PromptTokens || x.OutputTokens != y.OutputTokens || x.Priority != y.Priority {
			t.Fatalf("request %d differs: %+v vs %+v", i, x, y)
		}
	}
	cfg.Seed = 6
	if c := readSG(t, cfg, "mm-image"); len(c.Requests) == len(a.Requests) && c.Requests[0].Arrival == a.Requests[0].Arrival {
		t.Fatal("another seed gave the same workload")
	}
	// Classes are per client.
	cls := map[string]string{}
	for _, r := range a.Requests {
		if c, ok := cls[r.Tenant]; ok && c != r.Priority {
			t.Fatalf("tenant %s in classes %s and %s", r.Tenant, c, r.Priority)
		}
		cls[r.Tenant] = r.Priority
		if schemas.PriorityRank(r.Priority) < 0 {
			t.Fatalf("class %q", r.Priority)
		}
	}
}

func TestServeGenBadInput(t *testing.T) {
	head := "client_id,window_start_s,rate_rps,iat_cv,iat_dist,dist_shape,dist_scale\n"
	lengths := "model,client_id,window_start_s,field,mean,p50,p90,p99,max\nm,a,0,input_tokens,1,1,1,1,1\n"
	l, err := ReadServeGenLengths(strings.NewReader(lengths))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, rates, want string }{
		{"header", "a,b,c\n1,2,3\n", "want columns"},
		{"empty", head, "no rate windows"},
		{"dist", head + "a,0,1,1,Lognormal,1,1\n", "iat_dist"},
		{"negative rate", head + "a,0,-1,1,Gamma,1,1\n", "rate_rps"},
		{"bad shape", head + "a,0,1,1,Gamma,0,1\n", "positive"},
		{"not a number", head + "a,x,1,1,Gamma,1,1\n", "window_start_s"},
		{"short row", head + "a,0,1\n", "fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadServeGenRates(strings.NewReader(tc.rates), "m")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to mention %q", err, tc.want)
			}
		})
	}
	pool, err := ReadServeGenRates(strings.NewReader(head+"a,0,100,1,Gamma,1,1\n"), "m")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ServeGen([]ServeGenPool{pool}, l, ServeGenConfig{MaxRequests: 1000}); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("oversized workload: %v", err)
	}
	if _, err := ServeGen([]ServeGenPool{{Model: "other", Windows: pool.Windows}}, l, ServeGenConfig{}); err == nil || !strings.Contains(err.Error(), "no length statistics") {
		t.Fatalf("unknown model: %v", err)
	}
	if _, err := ServeGen([]ServeGenPool{pool}, l, ServeGenConfig{Start: 2 * time.Hour}); err == nil || !strings.Contains(err.Error(), "no arrivals") {
		t.Fatalf("empty range: %v", err)
	}
	if _, err := ReadServeGenFiles("testdata/rates.csv", "", ServeGenConfig{}); err == nil || !strings.Contains(err.Error(), "servegen_<model>_client_rates.csv") {
		t.Fatalf("bad name: %v", err)
	}
	// A client with no released lengths borrows another client's.
	pool2, _ := ReadServeGenRates(strings.NewReader(head+"zz,0,1,1,Gamma,1,1\n"), "m")
	tr, err := ServeGen([]ServeGenPool{pool2}, l, ServeGenConfig{Duration: 10 * time.Minute})
	if err != nil || len(tr.Requests) == 0 {
		t.Fatalf("fallback lengths: %v", err)
	}
}
