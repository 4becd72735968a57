package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// bench bus --json's last line is a contract: the fields it had, routers,
// and what it now says about stored and protocol messages. Two
// active-active routers at a fixed rate for a second: every request
// answered, one stored message per request on each of the four streams
// a request passes through, and shares of the batched ones.
func TestBenchBusJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded stack for a few seconds")
	}
	var out bytes.Buffer
	err := runBenchBus(context.Background(), []string{"--routers", "2", "--duration", "1s", "--rate", "200", "--inflight", "32", "--json"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	for _, k := range []string{"raw_js_publish_per_s", "pipeline_req_per_s", "ratio", "overhead_p50_ms", "overhead_p99_ms", "requests",
		"workers", "routers", "rate", "max_result_gap_ms", "pipeline_cpu_us_per_req", "raw_cpu_us_per_msg", "cpu_ratio",
		"stored_msgs_per_req", "stored_by_stream", "protocol_msgs_per_req", "idle_cpu_ms_per_s", "busy_cpu_us_per_req"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s in %v", k, got)
		}
	}
	if got["routers"] != 2.0 || got["rate"] != 200.0 {
		t.Errorf("routers %v, rate %v: want 2 and 200", got["routers"], got["rate"])
	}
	// At 200 a second for a second, about 200 requests; far fewer means
	// the rate or the pipeline is broken.
	if n, _ := got["requests"].(float64); n < 100 || n > 260 {
		t.Errorf("%v requests in 1 s at --rate 200", got["requests"])
	}
	by, _ := got["stored_by_stream"].(map[string]any)
	for _, s := range []string{"SUBMIT", "ADMITTED", "DISPATCH", "RESULTS"} {
		if v, _ := by[s].(float64); v < 0.99 || v > 1.01 {
			t.Errorf("%s: %v stored messages per request, want 1", s, by[s])
		}
	}
	// At a light load little batches: the journal and the events add up
	// to a few messages per request on top of the four.
	if v, _ := got["stored_msgs_per_req"].(float64); v < 4 || v > 16 {
		t.Errorf("stored_msgs_per_req %v, want the four and shares of the journal's and events' batches", v)
	}
	for _, s := range []string{"JOURNAL", "EVENTS"} {
		if v, _ := by[s].(float64); v <= 0 {
			t.Errorf("%s: %v stored messages per request, want some", s, by[s])
		}
	}
	if v, _ := got["protocol_msgs_per_req"].(float64); v < 10 {
		t.Errorf("protocol_msgs_per_req %v: a request is some twenty protocol messages", v)
	}
}

func TestBenchBusRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--routers", "0"}, {"--rate", "-1"}, {"--rate", "NaN"}, {"--inflight", "0"}} {
		err := runBenchBus(context.Background(), args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: err %v, want one naming %s", args, err, args[0])
		}
	}
}

// --by-conn splits the server's messages by client connection, and the
// split adds up to protocol_msgs_per_req: the client sends one submission
// per request and receives its publish ack and its result; the router,
// admitter and workers all move messages. Without the flag the field is
// left out, so the JSON line keeps its shape.
func TestBenchBusByConn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded stack for a few seconds")
	}
	for _, tc := range []struct {
		name   string
		byConn bool
	}{{"with --by-conn", true}, {"without", false}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--duration", "1s", "--rate", "200", "--inflight", "32", "--json"}
			if tc.byConn {
				args = append(args, "--by-conn")
			}
			var out bytes.Buffer
			if err := runBenchBus(context.Background(), args, &out); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var got BusResult
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
				t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
			}
			if !tc.byConn {
				if got.ProtocolByConn != nil {
					t.Errorf("protocol_msgs_by_conn %v without --by-conn", got.ProtocolByConn)
				}
				if strings.Contains(lines[len(lines)-1], "protocol_msgs_by_conn") {
					t.Errorf("the JSON line names protocol_msgs_by_conn without --by-conn: %s", lines[len(lines)-1])
				}
				return
			}
			sum := 0.0
			for _, v := range got.ProtocolByConn {
				sum += v
			}
			if got.ProtocolMsgsPerReq <= 0 || sum < 0.9*got.ProtocolMsgsPerReq || sum > 1.1*got.ProtocolMsgsPerReq {
				t.Errorf("by connection %.2f messages per request, server total %.2f: %v", sum, got.ProtocolMsgsPerReq, got.ProtocolByConn)
			}
			if v := got.ProtocolByConn["bench-client in"]; v < 0.95 || v > 1.2 {
				t.Errorf("bench-client in %.2f per request, want one submission each (and a share of pulls)", v)
			}
			for _, k := range []string{"bench-client out", "admitter-1 in", "admitter-1 out", "router-1 in", "router-1 out"} {
				if got.ProtocolByConn[k] <= 0 {
					t.Errorf("no %q in %v", k, got.ProtocolByConn)
				}
			}
		})
	}
}
