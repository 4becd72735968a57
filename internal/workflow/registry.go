package workflow

import (
	"context"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/bus"
	"github.com/switchyard-ai/switchyard/schemas"
)

// DefaultBucket is the KV bucket that holds workflow state.
const DefaultBucket = "sy_workflows"

// Config sizes the registry bucket.
type Config struct {
	Bucket string
	// TTL bounds how long an idle workflow is remembered: every update
	// rewrites the key, so only workflows untouched for TTL expire.
	TTL      time.Duration
	Replicas int
	Storage  jetstream.StorageType
}

// Registry is the workflow store: one KV entry per (tenant, workflow) and
// one small index entry per step request so a Result (which carries only
// the request id) can be attributed to its workflow.
type Registry struct {
	kv jetstream.KeyValue
}

// Open creates or binds the registry bucket. Safe to call from every
// service at start.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Registry, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	kv, err := bus.OpenKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "workflow steps started/finished/failed and deadlines",
		TTL:         cfg.TTL,
		Replicas:    cfg.Replicas,
		Storage:     cfg.Storage,
	}, bus.KVUpdate)
	if err != nil {
		return nil, fmt.Errorf("workflow registry: %w", err)
	}
	return &Registry{kv: kv}, nil
}

// KV exposes the bucket, for inspection tools and tests.
func (r *Registry) KV() jetstream.KeyValue { return r.kv }

var safeKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// tenantKey makes a tenant usable as a KV key token. Tenants are subject
// tokens, which allow characters KV keys do not; those are base32-encoded
// behind a '=' that plain tenants cannot contain, so two tenants never map
// to the same key.
func tenantKey(t string) string {
	if safeKey.MatchString(t) {
		return t
	}
	return "=" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(t))
}

func stateKey(tenant, id string) string   { return "wf." + tenantKey(tenant) + "." + id }
func requestKey(tenant, id string) string { return "rq." + tenantKey(tenant) + "." + id }

// Get returns a workflow's state, or nil when the registry has none.
func (r *Registry) Get(ctx context.Context, tenant, id string) (*State, error) {
	s, _, err := r.get(ctx, stateKey(tenant, id))
	return s, err
}

func (r *Registry) get(ctx context.Context, key string) (*State, uint64, error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("workflow get %s: %w", key, err)
	}
	var s State
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, 0, fmt.Errorf("workflow decode %s: %w", key, err)
	}
	if s.Steps == nil {
		s.Steps = map[int]*Step{}
	}
	return &s, e.Revision(), nil
}

// update applies fn to the current state under compare-and-set, retrying
// when another writer got there first. fn returns false to write nothing.
func (r *Registry) update(ctx context.Context, tenant, id string, fn func(s *State, exists bool) (bool, error)) (*State, error) {
	key := stateKey(tenant, id)
	for attempt := 0; attempt < 16; attempt++ {
		s, rev, err := r.get(ctx, key)
		if err != nil {
			return nil, err
		}
		exists := s != nil
		if !exists {
			s = &State{Tenant: tenant, ID: id, Steps: map[int]*Step{}}
		}
		changed, err := fn(s, exists)
		if err != nil {
			return nil, err
		}
		if !changed {
			if !exists {
				return nil, nil
			}
			return s, nil
		}
		b, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("workflow encode: %w", err)
		}
		if exists {
			_, err = r.kv.Update(ctx, key, b, rev)
		} else {
			_, err = r.kv.Create(ctx, key, b)
		}
		if err == nil {
			return s, nil
		}
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err) {
			continue // lost the race; re-read and re-apply
		}
		return nil, fmt.Errorf("workflow write %s: %w", key, err)
	}
	return nil, fmt.Errorf("workflow %s: too much write contention", key)
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// StepStart records that a step was admitted. The first step seen starts
// the workflow clock, and with it the workflow deadline. predicted is the
// step's predicted latency and gpuSeconds its predicted GPU work.
func (r *Registry) StepStart(ctx context.Context, tenant string, wf schemas.Workflow, requestID string, now time.Time, predicted time.Duration, gpuSeconds float64, maxRetries int) (*State, error) {
	s, err := r.update(ctx, tenant, wf.ID, func(s *State, exists bool) (bool, error) {
		if !exists {
			s.StartedAt = now
			s.MaxRetries = maxRetries
			if wf.DeadlineMs > 0 {
				s.Deadline = now.Add(time.Duration(wf.DeadlineMs) * time.Millisecond)
			}
		}
		if wf.Of > s.Of {
			s.Of = wf.Of
		}
		st := s.Steps[wf.Step]
		if st == nil {
			st = &Step{Number: wf.Step}
			s.Steps[wf.Step] = st
		}
		if st.RequestID == requestID && st.Status == StepStarted {
			return false, nil // a redelivered submit: already recorded
		}
		st.Attempts++
		st.RequestID = requestID
		st.Status = StepStarted
		st.StartedAt = now
		st.EndedAt = time.Time{}
		st.Error = ""
		st.PredictedSeconds = predicted.Seconds()
		st.GPUSeconds = gpuSeconds
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := r.kv.Put(ctx, requestKey(tenant, requestID), []byte(wf.ID)); err != nil {
		return nil, fmt.Errorf("workflow index %s: %w", requestID, err)
	}
	return s, nil
}

// Outcome is what a registry change means for the caller: whether it just
// doomed the workflow, which running steps to cancel (publish a
// schemas.Cancel for each), and the GPU-seconds this change saved.
type Outcome struct {
	State           *State
	NewlyDoomed     bool
	Cancel          []Step
	GPUSecondsSaved float64
}

// RecordResult applies a step's final Result. It returns a zero Outcome
// (and no error) for results of requests that are not workflow steps. A
// failure that exhausts the step's retries dooms the workflow at once, so
// its running steps are cancelled without waiting for the next step.
func (r *Registry) RecordResult(ctx context.Context, res schemas.Result, now time.Time) (Outcome, error) {
	e, err := r.kv.Get(ctx, requestKey(res.Tenant, res.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Outcome{}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("workflow index %s: %w", res.ID, err)
	}
	id := string(e.Value())
	var out Outcome
	s, err := r.update(ctx, res.Tenant, id, func(s *State, exists bool) (bool, error) {
		out = Outcome{}
		if !exists {
			return false, nil
		}
		var st *Step
		for _, c := range s.Steps {
			if c.RequestID == res.ID {
				st = c
			}
		}
		if st == nil || st.Status != StepStarted {
			return false, nil // stale or duplicate result
		}
		st.EndedAt = now
		switch {
		case res.Status == schemas.StatusOK:
			st.Status = StepFinished
		case res.Error != nil && (res.Error.Code == schemas.CodeCancelled || res.Error.Code == schemas.CodeWorkflowDoomed):
			st.Status = StepCanceled
		default:
			st.Status = StepFailed
			if res.Error != nil {
				st.Error = res.Error.Code + ": " + res.Error.Message
			} else {
				st.Error = res.Status
			}
		}
		if !s.Doomed {
			if v := Assess(s, now, 0); v.Doomed {
				out = markDoomed(s, v, now)
			}
		}
		return true, nil
	})
	out.State = s
	return out, err
}

// Refuse records that a step was refused because Decide judged the
// workflow doomed (reason). The first refusal marks the workflow doomed and
// returns its running steps to cancel; every refusal adds the refused
// step's predicted GPU work to the savings.
func (r *Registry) Refuse(ctx context.Context, tenant string, wf schemas.Workflow, requestID, reason string, now time.Time, gpuSeconds float64) (Outcome, error) {
	var out Outcome
	s, err := r.update(ctx, tenant, wf.ID, func(s *State, exists bool) (bool, error) {
		out = Outcome{}
		if !exists {
			s.StartedAt = now
			if wf.DeadlineMs > 0 {
				s.Deadline = now.Add(time.Duration(wf.DeadlineMs) * time.Millisecond)
			}
		}
		if wf.Of > s.Of {
			s.Of = wf.Of
		}
		if st := s.Steps[wf.Step]; st != nil && st.RequestID == requestID && st.Status == StepRefused {
			return false, nil // redelivery: counted already
		}
		if !s.Doomed {
			// Decide judged the workflow doomed with the refused step's
			// prediction, which Assess here does not have: doom it
			// regardless, and cancel what is running.
			v := Assess(s, now, 0)
			if !v.Doomed {
				v.Cancel, v.CancelGPUSeconds = cancellable(s, now)
			}
			v.Doomed, v.Reason = true, reason
			out = markDoomed(s, v, now)
		}
		st := s.Steps[wf.Step]
		if st == nil {
			st = &Step{Number: wf.Step}
			s.Steps[wf.Step] = st
		}
		st.Attempts++
		st.RequestID = requestID
		st.Status = StepRefused
		st.StartedAt, st.EndedAt = now, now
		st.GPUSeconds = gpuSeconds
		s.GPUSecondsSaved += gpuSeconds
		out.GPUSecondsSaved += gpuSeconds
		return true, nil
	})
	out.State = s
	return out, err
}

// markDoomed flips s to doomed and marks its running steps cancelled.
func markDoomed(s *State, v Verdict, now time.Time) Outcome {
	s.Doomed = true
	s.DoomedAt = now
	s.DoomedReason = v.Reason
	for _, c := range v.Cancel {
		if st := s.Steps[c.Number]; st != nil {
			st.Status = StepCanceled
			st.EndedAt = now
			st.Error = "cancelled: workflow doomed"
		}
	}
	s.GPUSecondsSaved += v.CancelGPUSeconds
	return Outcome{NewlyDoomed: true, Cancel: v.Cancel, GPUSecondsSaved: v.CancelGPUSeconds}
}
