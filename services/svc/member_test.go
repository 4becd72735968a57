package svc

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testkit/bustest"
)

// TestMembersSeeJoinAndDeath runs three members on a real server: each
// sees all three; one that stops cleanly leaves at once; one whose key
// stops being refreshed (a kill -9 as seen from the bucket) drops out
// within its TTL.
func TestMembersSeeJoinAndDeath(t *testing.T) {
	js := bustest.Start(t).JS
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := 900 * time.Millisecond
	kv, err := MemberKV(ctx, js, ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	views := map[string][]string{}
	run := func(c context.Context, name string) {
		go RunMember(c, kv, name, ttl, func(live []string) {
			mu.Lock()
			views[name] = live
			mu.Unlock()
		})
	}
	waitView := func(name string, want []string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			mu.Lock()
			got := slices.Clone(views[name])
			mu.Unlock()
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %v after %s, want %v", name, got, within, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	actx, stopA := context.WithCancel(ctx)
	run(actx, "a")
	run(ctx, "b")
	run(ctx, "c")
	waitView("a", []string{"a", "b", "c"}, 3*time.Second)
	waitView("c", []string{"a", "b", "c"}, 3*time.Second)

	stopA() // a clean exit deletes its key
	waitView("b", []string{"b", "c"}, 2*time.Second)

	// A member that dies without a word: its key is written once and
	// never refreshed, as a SIGKILLed router leaves it.
	if _, err := kv.Put(ctx, "d", []byte("d")); err != nil {
		t.Fatal(err)
	}
	waitView("b", []string{"b", "c", "d"}, 2*time.Second)
	start := time.Now()
	waitView("b", []string{"b", "c"}, ttl+2*time.Second)
	t.Logf("a silent member left the view %s after its last write (ttl %s)", time.Since(start).Round(10*time.Millisecond), ttl)
}

// TestLiveMembersAcrossClockSkew: a member's liveness is judged on the
// server's stamps moved onto this host's clock, so a server clock 30 s
// behind (or ahead of) the router's neither reads every peer as dead nor a
// dead one as live.
func TestLiveMembersAcrossClockSkew(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	const maxAge = 4 * time.Second
	for _, tc := range []struct {
		name string
		skew time.Duration // server minus local
	}{
		{"clocks agree", 0},
		{"server 30 s behind", -30 * time.Second},
		{"server 30 s ahead", 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := now.Add(tc.skew)
			written := map[string]time.Time{
				"fresh": server.Add(-time.Second),      // wrote a second ago
				"dead":  server.Add(-10 * time.Second), // silent for 10 s
			}
			got := liveMembers("me", written, tc.skew, now, maxAge)
			if want := []string{"fresh", "me"}; !slices.Equal(got, want) {
				t.Fatalf("live %v, want %v", got, want)
			}
		})
	}
}
