package engine

import "testing"

// TestResumeRePrefillsEmitted: continuing a sequence after k tokens were
// emitted elsewhere prefills prompt+k here and generates max−k, and the
// re-prefill shows in its GPU time against a fresh run of the same k.
func TestResumeRePrefillsEmitted(t *testing.T) {
	const prompt, maxTok = 1024, 400
	for _, k := range []int{0, 1, 150, 399} {
		orig := seqOf("r", 7, prompt, maxTok)
		s, err := Resume(orig, k)
		if err != nil {
			t.Fatalf("k=%d: %v", k, err)
		}
		e := newEngine(t, Config{})
		if err := e.Add(s); err != nil {
			t.Fatal(err)
		}
		fin, _ := run(t, e, t0, nil)
		if len(fin) != 1 {
			t.Fatalf("k=%d: %d finished", k, len(fin))
		}
		f := fin[0]
		if f.PromptTokens != prompt+k || f.OutputTokens != maxTok-k {
			t.Fatalf("k=%d: prefilled %d and generated %d, want %d and %d", k, f.PromptTokens, f.OutputTokens, prompt+k, maxTok-k)
		}
		// The same remaining decode without the emitted tokens to re-prefill.
		fresh := newEngine(t, Config{})
		if err := fresh.Add(seqOf("f", 7, prompt, maxTok-k)); err != nil {
			t.Fatal(err)
		}
		ff, _ := run(t, fresh, t0, nil)
		rep := replica(t)
		extra := rep.PrefillSeconds(prompt+k, 0) - rep.PrefillSeconds(prompt, 0)
		if k > 0 && f.GPUSeconds <= ff[0].GPUSeconds {
			t.Fatalf("k=%d: resumed run cost %.4fs, no more than a fresh %d-token prompt (%.4fs): the re-prefill is free", k, f.GPUSeconds, prompt, ff[0].GPUSeconds)
		}
		// Decode steps read the longer context too, so the gap is at least
		// the extra prefill, give or take step granularity.
		if gap := f.GPUSeconds - ff[0].GPUSeconds; gap < 0.5*extra {
			t.Fatalf("k=%d: resumed run costs %.4fs more than fresh, want at least about the extra prefill %.4fs", k, gap, extra)
		}
	}
}

func TestResumeRefusesNothingLeft(t *testing.T) {
	for _, tc := range []struct {
		name    string
		emitted int
	}{{"all emitted", 400}, {"more than max", 401}, {"negative", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Resume(seqOf("r", 7, 100, 400), tc.emitted); err == nil {
				t.Fatalf("Resume(%d of 400) succeeded, want an error", tc.emitted)
			}
		})
	}
}
