package workflowstore

import (
	"context"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/bus"
	"github.com/switchyard-ai/switchyard/internal/core/workflow"
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
func (r *Registry) Get(ctx context.Context, tenant, id string) (*workflow.State, error) {
	s, _, err := r.get(ctx, stateKey(tenant, id))
	return s, err
}

func (r *Registry) get(ctx context.Context, key string) (*workflow.State, uint64, error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("workflow get %s: %w", key, err)
	}
	var s workflow.State
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, 0, fmt.Errorf("workflow decode %s: %w", key, err)
	}
	if s.Steps == nil {
		s.Steps = map[int]*workflow.Step{}
	}
	return &s, e.Revision(), nil
}

// update applies fn to the current state under compare-and-set, retrying
// when another writer got there first. fn returns false to write nothing.
func (r *Registry) update(ctx context.Context, tenant, id string, fn func(s *workflow.State, exists bool) (bool, error)) (*workflow.State, error) {
	key := stateKey(tenant, id)
	for attempt := 0; attempt < 16; attempt++ {
		s, rev, err := r.get(ctx, key)
		if err != nil {
			return nil, err
		}
		exists := s != nil
		if !exists {
			s = &workflow.State{Tenant: tenant, ID: id, Steps: map[int]*workflow.Step{}}
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

// StepStart records that a step was admitted (workflow.StartStep) and
// indexes its request id, so the step's Result can find its workflow.
func (r *Registry) StepStart(ctx context.Context, tenant string, wf schemas.Workflow, requestID string, now time.Time, predicted time.Duration, gpuSeconds float64, maxRetries int) (*workflow.State, error) {
	s, err := r.update(ctx, tenant, wf.ID, func(s *workflow.State, exists bool) (bool, error) {
		return workflow.StartStep(s, exists, wf, requestID, now, predicted, gpuSeconds, maxRetries), nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := r.kv.Put(ctx, requestKey(tenant, requestID), []byte(wf.ID)); err != nil {
		return nil, fmt.Errorf("workflow index %s: %w", requestID, err)
	}
	return s, nil
}

// RecordResult applies a step's final Result (workflow.ApplyResult). It
// returns a zero Outcome (and no error) for results of requests that are
// not workflow steps.
func (r *Registry) RecordResult(ctx context.Context, res schemas.Result, now time.Time) (workflow.Outcome, error) {
	e, err := r.kv.Get(ctx, requestKey(res.Tenant, res.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return workflow.Outcome{}, nil
	}
	if err != nil {
		return workflow.Outcome{}, fmt.Errorf("workflow index %s: %w", res.ID, err)
	}
	var out workflow.Outcome
	s, err := r.update(ctx, res.Tenant, string(e.Value()), func(s *workflow.State, exists bool) (bool, error) {
		var changed bool
		changed, out = workflow.ApplyResult(s, exists, res, now)
		return changed, nil
	})
	out.State = s
	return out, err
}

// Refuse records that a step was refused because Decide judged the
// workflow doomed (workflow.Refuse).
func (r *Registry) Refuse(ctx context.Context, tenant string, wf schemas.Workflow, requestID, reason string, now time.Time, gpuSeconds float64) (workflow.Outcome, error) {
	var out workflow.Outcome
	s, err := r.update(ctx, tenant, wf.ID, func(s *workflow.State, exists bool) (bool, error) {
		var changed bool
		changed, out = workflow.Refuse(s, exists, wf, requestID, reason, now, gpuSeconds)
		return changed, nil
	})
	out.State = s
	return out, err
}
