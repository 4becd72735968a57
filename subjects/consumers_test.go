package subjects

import (
	"strings"
	"testing"
)

func TestNamesBuilt(t *testing.T) {
	tests := []struct{ got, want string }{
		{Schedule("acme", "req-1"), "sy.sched.acme.req-1"},
		{RouterConsumer("batch"), "router-batch"},
		{WorkerConsumer("w1"), "worker-w1"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// A schedule must sit inside the ADMITTED stream (schedules fire only
// within their stream) and outside every router filter (sy.admitted.>),
// or a router would dispatch the request before its time.
func TestScheduleInsideAdmittedOutsideRouters(t *testing.T) {
	subj := Schedule("acme", "req-1")
	if strings.HasPrefix(subj, strings.TrimSuffix(AdmittedAll, ">")) {
		t.Fatalf("schedule %q falls under the routers' filter %s", subj, AdmittedAll)
	}
	for _, cfg := range Streams(StreamOptions{}) {
		if cfg.Name != StreamAdmitted {
			continue
		}
		for _, s := range cfg.Subjects {
			if s == ScheduleAll {
				return
			}
		}
		t.Fatalf("stream %s subjects %v do not capture %s", cfg.Name, cfg.Subjects, ScheduleAll)
	}
	t.Fatalf("no stream %s", StreamAdmitted)
}
