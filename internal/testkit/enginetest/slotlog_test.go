package enginetest

import (
	"strings"
	"testing"
)

// TestSlotLog reads the runner's "loading cache slot" lines as v0.6.5
// writes them, split across writes anywhere, and refuses a line that does
// not add up or lacks a field rather than counting it wrong.
func TestSlotLog(t *testing.T) {
	const ok1 = `time=2025-04-08T10:00:00.000Z level=DEBUG source=cache.go:104 msg="loading cache slot" id=1 cache=660 prompt=688 used=655 remaining=33`
	const ok2 = `time=2025-04-08T10:00:01.000Z level=DEBUG source=cache.go:104 msg="loading cache slot" id=0 cache=0 prompt=690 used=0 remaining=690`
	for _, tc := range []struct {
		name    string
		log     string
		want    []SlotLoad
		wantErr string
	}{
		{"two loads among other lines", "level=INFO msg=\"llama runner started\"\n" + ok1 + "\n" + ok2 + "\n",
			[]SlotLoad{{Slot: 1, Cached: 660, Prompt: 688, Used: 655, Remaining: 33}, {Slot: 0, Prompt: 690, Remaining: 690}}, ""},
		{"a line not yet ended is not read", ok1 + "\n" + ok2, []SlotLoad{{Slot: 1, Cached: 660, Prompt: 688, Used: 655, Remaining: 33}}, ""},
		{"used and remaining must make the prompt", strings.Replace(ok1, "remaining=33", "remaining=34", 1) + "\n", nil, "is not the prompt's 688"},
		{"a missing field is an error", strings.Replace(ok1, " used=655", "", 1) + "\n", nil, "lacks used="},
		{"a field that is not a number is an error", strings.Replace(ok1, "id=1", "id=one", 1) + "\n", nil, `id="one"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &slotLog{}
			for i := 0; i < len(tc.log); i += 7 { // writes that split lines
				l.Write([]byte(tc.log[i:min(i+7, len(tc.log))]))
			}
			got, err := l.loads()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("loads %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("load %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestSlotLoadsNeedDebug: without OLLAMA_DEBUG the runner logs no cache
// lines, and SlotLoads says so instead of reporting none evaluated.
func TestSlotLoadsNeedDebug(t *testing.T) {
	if _, err := (&Ollama{}).SlotLoads(); err == nil || !strings.Contains(err.Error(), "Options.Debug") {
		t.Fatalf("err = %v", err)
	}
}
