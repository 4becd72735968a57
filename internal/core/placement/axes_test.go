package placement

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/fleet"
	"github.com/switchyard-ai/switchyard/schemas"
)

// Every axis name has exactly one row, with at least one hook, and the
// rows' ids are the indices the placer's switches use.
func TestAxesTableCoversEveryAxis(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range axes {
		if seen[a.name] {
			t.Fatalf("axis %q declared twice", a.name)
		}
		seen[a.name] = true
		if axisNames[a.id] != a.name {
			t.Errorf("axis %q has id %d, which is %q", a.name, a.id, axisNames[a.id])
		}
		if a.prepare == nil && a.measure == nil && a.filter == nil && a.seconds == nil && a.check == nil && a.price == nil && a.surcharge == nil {
			t.Errorf("axis %q has no hook", a.name)
		}
		if len(a.reads) == 0 || len(a.terms) == 0 || a.bound == "" {
			t.Errorf("axis %q declares no reads, terms or bound", a.name)
		}
	}
	for _, name := range Axes {
		if !seen[name] {
			t.Errorf("axis %q has no row", name)
		}
	}
}

// schemaTypes are the types an axis may declare reads of.
var schemaTypes = map[string]reflect.Type{
	"Heartbeat": reflect.TypeFor[schemas.Heartbeat](),
	"KVEvent":   reflect.TypeFor[schemas.KVEvent](),
	"Worker":    reflect.TypeFor[fleet.Worker](),
	"Request":   reflect.TypeFor[Request](),
}

// Every field an axis declares it reads exists in its schema, and every
// term it declares is a Terms field: renaming or dropping a heartbeat
// field fails here, not silently in a ranking.
func TestAxisReadsExistInTheSchemas(t *testing.T) {
	termNames := map[string]bool{}
	tt := reflect.TypeFor[Terms]()
	for i := range tt.NumField() {
		termNames[strings.Split(tt.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	for _, a := range axes {
		for _, read := range a.reads {
			if err := checkRead(read); err != "" {
				t.Errorf("axis %q reads %s: %s", a.name, read, err)
			}
		}
		for _, term := range a.terms {
			if !termNames[term] {
				t.Errorf("axis %q declares term %q, which Terms has not", a.name, term)
			}
		}
	}
	// The check itself turns down what does not exist.
	for _, bad := range []string{"Heartbeat.KVBlocksSpare", "Heartbeat", "Fleet.Workers", "Request.deadline"} {
		if checkRead(bad) == "" {
			t.Errorf("checkRead(%q) found it", bad)
		}
	}
}

func checkRead(read string) string {
	typ, field, ok := strings.Cut(read, ".")
	if !ok {
		return "not Type.Field"
	}
	st, ok := schemaTypes[typ]
	if !ok {
		return "no such schema"
	}
	if _, ok := st.FieldByName(field); !ok {
		return "no such field in " + st.String()
	}
	return ""
}

// axisScenario is one worker and one request, everything an axis reads.
type axisScenario struct {
	hb          schemas.Heartbeat
	stored      []uint64 // block hashes the worker holds (a KV event)
	booked      int      // KV blocks booked on it by the router
	bookedClass string   // the booking's class; "" is standard
	req         Request
	weight      uint64 // the model's weight bytes; 0 for unknown
}

func baseScenario() axisScenario {
	hashes := make([]uint64, 10)
	for i := range hashes {
		hashes[i] = uint64(i+1) * 0x9E3779B97F4A7C15
	}
	return axisScenario{
		hb: schemas.Heartbeat{
			WorkerID: "A", GPU: "h100", Arch: "hopper", TP: 1,
			HBMTotalBytes: 80 << 30, HBMFreeBytes: 40 << 30,
			KVBlocksTotal: 1000, KVBlocksFree: 250, BlockSize: 16,
			Models:  []schemas.ModelState{{Name: "llama-8b", Dtype: "bf16", State: schemas.WeightHot}},
			Running: 3, QueuedTokens: 4000, QueuedTokensByClass: map[string]int{schemas.PriorityBatch: 4000},
		},
		stored: hashes[:5],
		req: Request{
			ID: "r", Model: "llama-8b", Dtype: "bf16", Priority: schemas.PriorityInteractive,
			PromptTokens: 2000, OutputTokens: 200, BlockHashes: hashes, Deadline: now.Add(30 * time.Second),
		},
	}
}

// outcome places s.req on s's one worker: its terms, or the reason it was
// turned down.
func (s *axisScenario) outcome(t *testing.T) (Terms, Reason) {
	t.Helper()
	f := fleet.New(fleet.Options{})
	hb := s.hb
	f.ApplyHeartbeat(&hb, now)
	if len(s.stored) > 0 {
		f.ApplyKV(&schemas.KVEvent{WorkerID: "A", Seq: 1, Kind: schemas.KVStored, Hashes: s.stored}, now)
	}
	if s.booked > 0 {
		class := s.bookedClass
		if class == "" {
			class = schemas.PriorityStandard
		}
		if err := f.Reserve("A", "earlier", class, 1, 1, s.booked, now); err != nil {
			t.Fatal(err)
		}
	}
	weight := s.weight
	// splitCost prices KV transfers too, for the phase axis's decode legs.
	p := New(splitCost{BenchCost()}, Options{WeightBytes: func(string, string) uint64 { return weight }})
	d := p.Place(f, &s.req, now)
	if d.OK() {
		return d.Terms, ReasonNone
	}
	if len(d.Rejections) != 1 {
		t.Fatalf("no decision and %d rejections", len(d.Rejections))
	}
	return Terms{}, d.Rejections[0].Reason
}

// A perturbation changes one declared read; base, when set, first puts
// the scenario where that read matters (a cold model for the HBM checks,
// a critical request short of free blocks for reclaiming).
type perturbation struct {
	base, change func(s *axisScenario)
}

var perturbations = map[string]perturbation{
	"KVEvent.Hashes":       {change: func(s *axisScenario) { s.stored = nil }},
	"Heartbeat.BlockSize":  {change: func(s *axisScenario) { s.hb.BlockSize = 32 }},
	"Request.BlockHashes":  {change: func(s *axisScenario) { s.req.BlockHashes = slices.Clone(s.req.BlockHashes); s.req.BlockHashes[0]++ }},
	"Request.PromptTokens": {change: func(s *axisScenario) { s.req.PromptTokens = 2500 }},
	"Request.OutputTokens": {change: func(s *axisScenario) { s.req.OutputTokens = 400 }},
	"Heartbeat.GPU":        {change: func(s *axisScenario) { s.hb.GPU = "a100"; s.hb.Arch = "" }},
	"Heartbeat.Arch": {
		base:   func(s *axisScenario) { s.req.Dtype = "fp8" },
		change: func(s *axisScenario) { s.hb.Arch = "ampere" },
	},
	"Heartbeat.TP":           {change: func(s *axisScenario) { s.hb.TP = 2 }},
	"Heartbeat.PricePerHour": {change: func(s *axisScenario) { s.hb.PricePerHour = 10 }},
	"Heartbeat.HBMTotalBytes": {
		base:   func(s *axisScenario) { s.weight, s.hb.Models[0].State = 16<<30, schemas.WeightCold },
		change: func(s *axisScenario) { s.hb.HBMTotalBytes = 8 << 30 },
	},
	"Request.Dtype": {
		base:   func(s *axisScenario) { s.hb.Arch = "ampere" },
		change: func(s *axisScenario) { s.req.Dtype = "fp8" },
	},
	"Request.Model": {
		base: func(s *axisScenario) {
			s.hb.Models = append(s.hb.Models, schemas.ModelState{Name: "llama-70b", Dtype: "bf16", State: schemas.WeightHot})
		},
		change: func(s *axisScenario) { s.req.Model = "llama-70b" },
	},
	"Heartbeat.Models":        {change: func(s *axisScenario) { s.hb.Models[0].State = schemas.WeightSleeping }},
	"Heartbeat.KVBlocksTotal": {change: func(s *axisScenario) { s.hb.KVBlocksTotal = 2000 }},
	"Heartbeat.KVBlocksFree":  {change: func(s *axisScenario) { s.hb.KVBlocksFree = 100 }},
	"Heartbeat.HBMFreeBytes": {
		base:   func(s *axisScenario) { s.weight, s.hb.Models[0].State = 16<<30, schemas.WeightCold },
		change: func(s *axisScenario) { s.hb.HBMFreeBytes = 8 << 30 },
	},
	"Heartbeat.KVBlocksByClass": {
		base: func(s *axisScenario) { s.req.Priority, s.hb.KVBlocksFree = schemas.PriorityCritical, 100 },
		change: func(s *axisScenario) {
			s.hb.KVBlocksByClass = map[string]int{schemas.PriorityBatch: 800}
		},
	},
	"Worker.BookedBlocks":           {change: func(s *axisScenario) { s.booked = 200 }},
	"Request.Priority":              {change: func(s *axisScenario) { s.req.Priority = schemas.PriorityStandard }},
	"Heartbeat.QueuedTokensByClass": {change: func(s *axisScenario) { s.hb.QueuedTokensByClass = map[string]int{schemas.PriorityInteractive: 4000} }},
	"Request.Workflow":              {change: func(s *axisScenario) { s.req.Workflow = &schemas.Workflow{ID: "wf", Step: 3, Of: 4} }},
	"Request.WorkflowDeadline": {
		base: func(s *axisScenario) {
			s.req.Workflow = &schemas.Workflow{ID: "wf", Step: 2, Of: 4}
			s.req.WorkflowDeadline = now.Add(15 * time.Second)
		},
		change: func(s *axisScenario) { s.req.WorkflowDeadline = now.Add(60 * time.Second) },
	},
	"Request.Deadline":   {change: func(s *axisScenario) { s.req.Deadline = now.Add(10 * time.Second) }},
	"Request.TTFTTarget": {change: func(s *axisScenario) { s.req.TTFTTarget = 5 * time.Second }},
	"Request.TPOTTarget": {change: func(s *axisScenario) { s.req.TPOTTarget = 9 * time.Millisecond }},
	"Request.Submitted":  {change: func(s *axisScenario) { s.req.Submitted = now.Add(-time.Second) }},
	"Request.HardDeadline": {
		base:   func(s *axisScenario) { s.req.Deadline = now.Add(100 * time.Millisecond) },
		change: func(s *axisScenario) { s.req.HardDeadline = now.Add(time.Minute) },
	},

	// The interference axis prices neighbours' TPOT risk, which an L4
	// decoding near the critical class's 50 ms target has (BenchCost: a
	// 45 ms step at this batch).
	"interference/Heartbeat.Running": {base: onL4, change: func(s *axisScenario) { s.hb.Running = 1 }},
	"interference/Heartbeat.KVBlocksByClass": {
		base:   onL4,
		change: func(s *axisScenario) { s.hb.KVBlocksByClass = map[string]int{schemas.PriorityBatch: 750} },
	},
	"interference/Heartbeat.QueuedTokensByClass": {
		base:   onL4,
		change: func(s *axisScenario) { s.hb.QueuedTokensByClass = map[string]int{schemas.PriorityBatch: 40000} },
	},
	"interference/Worker.BookedRequests": {base: onL4, change: func(s *axisScenario) { s.booked = 10 }},
	"interference/Worker.BookedPromptByClass": {
		base:   func(s *axisScenario) { onL4(s); s.booked = 10 },
		change: func(s *axisScenario) { s.bookedClass = schemas.PriorityCritical },
	},
}

func onL4(s *axisScenario) { s.hb.GPU, s.hb.Arch = "l4", "ada" }

// The phase axis's reads: a role that does not take an aggregated
// request, a leg without a link, a leg's own pricing, and a decode leg
// whose source (here the worker itself) is gone.
func init() {
	linked := func(s *axisScenario) { s.hb.Link = "ib-ndr" }
	perturbations["Heartbeat.Role"] = perturbation{change: func(s *axisScenario) { s.hb.Role = schemas.RolePrefill }}
	perturbations["Heartbeat.Link"] = perturbation{
		base:   func(s *axisScenario) { linked(s); s.req.Phase = schemas.PhasePrefill },
		change: func(s *axisScenario) { s.hb.Link = "" },
	}
	perturbations["Request.Phase"] = perturbation{base: linked, change: func(s *axisScenario) { s.req.Phase = schemas.PhasePrefill }}
	perturbations["Request.Source"] = perturbation{
		base:   func(s *axisScenario) { linked(s); s.req.Phase, s.req.Source = schemas.PhaseDecode, "A" },
		change: func(s *axisScenario) { s.req.Source = "gone" },
	}
}

// Each field an axis declares moves that axis's outcome: perturbed, one
// of the Terms fields the axis declares changes, or the worker is turned
// down (or let through) for one of the axis's own reasons. A read with no
// perturbation here fails, so a new axis's reads are tested as they are
// declared. A perturbation keyed "axis/read" is that axis's own, for a
// read two axes share that moves each only from its own base.
func TestAxisReadsMoveTheirAxis(t *testing.T) {
	for _, a := range axes {
		for _, read := range a.reads {
			t.Run(a.name+"/"+read, func(t *testing.T) {
				pt, ok := perturbations[a.name+"/"+read] // one of the axis's own, else the read's
				if !ok {
					pt, ok = perturbations[read]
				}
				if !ok {
					t.Fatalf("no perturbation for %s: add one to perturbations", read)
				}
				s := baseScenario()
				if pt.base != nil {
					pt.base(&s)
				}
				before, beforeReason := s.outcome(t)
				pt.change(&s)
				after, afterReason := s.outcome(t)
				if beforeReason != afterReason {
					if !slices.Contains(a.filters, beforeReason) && !slices.Contains(a.filters, afterReason) {
						t.Fatalf("outcome moved from %q to %q, neither of them the axis's", beforeReason, afterReason)
					}
					return
				}
				if beforeReason != ReasonNone {
					t.Fatalf("turned down for %q before and after", beforeReason)
				}
				if moved := movedTerms(before, after, a.terms); len(moved) == 0 {
					t.Fatalf("none of %v moved (before %+v, after %+v)", a.terms, before, after)
				}
			})
		}
	}
}

// movedTerms lists the fields of names (Terms' JSON names) that differ
// between a and b.
func movedTerms(a, b Terms, names []string) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var moved []string
	for i := range va.NumField() {
		name := strings.Split(va.Type().Field(i).Tag.Get("json"), ",")[0]
		if slices.Contains(names, name) && !va.Field(i).Equal(vb.Field(i)) {
			moved = append(moved, name)
		}
	}
	return moved
}
