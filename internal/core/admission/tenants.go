package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/core/cache"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Unknown-tenant policies.
const (
	UnknownDefault = "default" // serve with the "default" profile
	UnknownReject  = "reject"  // refuse with unknown_tenant
)

// DefaultLadder is the model ladder, smallest first, used when the config
// names none. Tiers are positions on the ladder.
var DefaultLadder = []string{"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b"}

// SLO is a tenant's latency target.
type SLO struct {
	TTFTMs int64 `json:"ttft_ms,omitempty"`
	// TPOTMs is the per-output-token latency target.
	TPOTMs int64 `json:"tpot_ms,omitempty"`
}

// FillTargets gives an admitted request that names no TTFT or TPOT target
// of its own the tenant's (its profile's slo): the router places it
// against them (placement.Request) and its result's slo_met holds them
// (internal/core/slo). A request's own targets stand.
func (s SLO) FillTargets(a *schemas.Admitted) {
	if a.TTFTTargetMs <= 0 && s.TTFTMs > 0 {
		a.TTFTTargetMs = float64(s.TTFTMs)
	}
	if a.TPOTTargetMs <= 0 && s.TPOTMs > 0 {
		a.TPOTTargetMs = float64(s.TPOTMs)
	}
}

// Quota is a tenant's rate limit; 0 means unlimited.
type Quota struct {
	RequestsPerMin float64 `json:"requests_per_min,omitempty"`
	TokensPerMin   float64 `json:"tokens_per_min,omitempty"`
	// BurstSeconds is how many seconds of rate a bucket holds; 0 means 60
	// (a full minute's allowance may arrive at once).
	BurstSeconds float64 `json:"burst_s,omitempty"`
}

// Budget is a spending cap; USD 0 means none.
type Budget struct {
	USD float64 `json:"usd,omitempty"`
	// Per is "hour" or "day" (UTC calendar windows).
	Per string `json:"per,omitempty"`
}

// Profile is one tenant's admission policy.
type Profile struct {
	// Name is the tenant; Default is true when an unknown tenant was given
	// the default profile.
	Name    string `json:"-"`
	Default bool   `json:"-"`

	Priority string `json:"priority"`
	// AllowedPriorities lists the classes the tenant may request; empty
	// means its own class and every class below it. A tenant may never
	// claim a class above its own.
	AllowedPriorities []string `json:"allowed_priorities,omitempty"`
	// DefaultPriority is the class of a request that names none; empty
	// means Priority. It lets a tenant be allowed a high class without
	// all of its unlabelled traffic landing there.
	DefaultPriority   string `json:"default_priority,omitempty"`
	SLO               SLO    `json:"slo"`
	DefaultDeadlineMs int64  `json:"default_deadline_ms,omitempty"`
	Quota             Quota  `json:"quota"`
	Budget            Budget `json:"budget"`
	AllowAuto         bool   `json:"allow_auto,omitempty"`
	AllowDowngrade    bool   `json:"allow_downgrade,omitempty"`
	// Models is an allowlist of model names; empty allows every model.
	Models []string     `json:"models,omitempty"`
	Cache  cache.Policy `json:"cache"`
	// WorkflowStepRetries is how often one workflow step may be retried
	// before its workflow is doomed; nil means 1.
	WorkflowStepRetries *int `json:"workflow_step_retries,omitempty"`
}

// DefaultDeadline is the deadline for requests that set none.
func (p Profile) DefaultDeadline() time.Duration {
	if p.DefaultDeadlineMs <= 0 {
		return 60 * time.Second
	}
	return time.Duration(p.DefaultDeadlineMs) * time.Millisecond
}

// StepRetries is WorkflowStepRetries with its default.
func (p Profile) StepRetries() int {
	if p.WorkflowStepRetries == nil {
		return 1
	}
	return *p.WorkflowStepRetries
}

// ModelAllowed reports whether the tenant may use model.
func (p Profile) ModelAllowed(model string) bool {
	return len(p.Models) == 0 || slices.Contains(p.Models, model)
}

// ResolvePriority returns the effective class of a request: the tenant's
// class when it asks for none, the asked class when the tenant may use it,
// and priority_not_allowed otherwise.
func (p Profile) ResolvePriority(asked string) (string, *schemas.Error) {
	if asked == "" {
		if p.DefaultPriority != "" {
			return p.DefaultPriority, nil
		}
		return p.Priority, nil
	}
	if slices.Contains(p.allowedPriorities(), asked) {
		return asked, nil
	}
	return "", schemas.Errf(schemas.CodePriorityNotAllowed, "priority",
		"tenant %q may use priority %s, not %q", p.Name, strings.Join(p.allowedPriorities(), ", "), asked)
}

func (p Profile) allowedPriorities() []string {
	own := schemas.PriorityRank(p.Priority)
	var out []string
	if len(p.AllowedPriorities) == 0 {
		return schemas.Priorities[own:]
	}
	for _, c := range p.AllowedPriorities {
		if schemas.PriorityRank(c) >= own {
			out = append(out, c)
		}
	}
	return out
}

func (p *Profile) validate(name string) error {
	if p.Priority == "" {
		p.Priority = schemas.PriorityStandard
	}
	if schemas.PriorityRank(p.Priority) < 0 {
		return fmt.Errorf("tenant %s: priority %q: use one of %s", name, p.Priority, strings.Join(schemas.Priorities, ", "))
	}
	own := schemas.PriorityRank(p.Priority)
	for _, c := range p.AllowedPriorities {
		r := schemas.PriorityRank(c)
		if r < 0 {
			return fmt.Errorf("tenant %s: allowed priority %q is not a class", name, c)
		}
		if r < own {
			return fmt.Errorf("tenant %s: allowed priority %q is above the tenant's own class %s", name, c, p.Priority)
		}
	}
	if p.DefaultPriority != "" && !slices.Contains(p.allowedPriorities(), p.DefaultPriority) {
		return fmt.Errorf("tenant %s: default_priority %q is not among the classes it may use (%s)", name, p.DefaultPriority, strings.Join(p.allowedPriorities(), ", "))
	}
	if p.Quota.RequestsPerMin < 0 || p.Quota.TokensPerMin < 0 || p.Quota.BurstSeconds < 0 {
		return fmt.Errorf("tenant %s: quotas must be >= 0", name)
	}
	if p.Budget.USD < 0 {
		return fmt.Errorf("tenant %s: budget must be >= 0", name)
	}
	switch p.Budget.Per {
	case "", "hour", "day":
	default:
		return fmt.Errorf("tenant %s: budget per %q: use hour or day", name, p.Budget.Per)
	}
	if p.Budget.USD > 0 && p.Budget.Per == "" {
		p.Budget.Per = "hour"
	}
	if p.DefaultDeadlineMs < 0 || p.SLO.TTFTMs < 0 || p.SLO.TPOTMs < 0 {
		return fmt.Errorf("tenant %s: deadlines and SLOs must be >= 0", name)
	}
	if p.WorkflowStepRetries != nil && *p.WorkflowStepRetries < 0 {
		return fmt.Errorf("tenant %s: workflow_step_retries must be >= 0", name)
	}
	if err := p.Cache.Validate(); err != nil {
		return fmt.Errorf("tenant %s: %w", name, err)
	}
	return nil
}

// Config is the tenants file.
type Config struct {
	// APIKeys maps gateway API keys to tenants. The gateway reads it from
	// the same file (internal/adapter/gateway); admission only tolerates it.
	APIKeys map[string]string `json:"api_keys,omitempty"`
	// UnknownTenants is "default" or "reject"; empty means "default".
	UnknownTenants string `json:"unknown_tenants"`
	// Default is the profile of unknown tenants under "default".
	Default Profile `json:"default"`
	// ModelLadder is the Move ladder, smallest model first.
	ModelLadder []string           `json:"model_ladder,omitempty"`
	Tenants     map[string]Profile `json:"tenants"`
}

// Tenants is a validated tenant configuration.
type Tenants struct {
	cfg Config
}

// ParseTenants validates a tenants JSON document. Unknown fields are an
// error, so a misspelt quota does not silently mean "unlimited".
func ParseTenants(b []byte) (*Tenants, error) {
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		if strings.Contains(err.Error(), `unknown field "allow_pool_move"`) {
			return nil, fmt.Errorf("%w: allow_pool_move was removed — the router's placer prices every pool for each request (gpu_usd at the worker's price against the class's value of time), so admission no longer hints one; delete the field", err)
		}
		return nil, err
	}
	return NewTenants(cfg)
}

// NewTenants validates cfg.
func NewTenants(cfg Config) (*Tenants, error) {
	switch cfg.UnknownTenants {
	case "":
		cfg.UnknownTenants = UnknownDefault
	case UnknownDefault, UnknownReject:
	default:
		return nil, fmt.Errorf("unknown_tenants %q: use default or reject", cfg.UnknownTenants)
	}
	if err := cfg.Default.validate("default"); err != nil {
		return nil, err
	}
	if len(cfg.ModelLadder) == 0 {
		cfg.ModelLadder = slices.Clone(DefaultLadder)
	}
	tenants := make(map[string]Profile, len(cfg.Tenants))
	for name, p := range cfg.Tenants {
		if !subjects.ValidToken(name) {
			return nil, fmt.Errorf("tenant name %q cannot be a subject token", name)
		}
		if err := p.validate(name); err != nil {
			return nil, err
		}
		p.Name = name
		tenants[name] = p
	}
	cfg.Tenants = tenants
	return &Tenants{cfg: cfg}, nil
}

// Ladder is the configured model ladder, smallest first.
func (t *Tenants) Ladder() []string { return slices.Clone(t.cfg.ModelLadder) }

// Lookup returns a tenant's profile. The tenant comes from the subject
// (sy.submit.<tenant>), never from the payload.
func (t *Tenants) Lookup(tenant string) (Profile, *schemas.Error) {
	if !subjects.ValidToken(tenant) {
		return Profile{}, schemas.Errf(schemas.CodeInvalidTenant, "", "tenant %q is not a valid subject token", tenant)
	}
	if p, ok := t.cfg.Tenants[tenant]; ok {
		return p, nil
	}
	if t.cfg.UnknownTenants == UnknownReject {
		return Profile{}, schemas.Errf(schemas.CodeUnknownTenant, "", "tenant %q is not configured and unknown tenants are rejected", tenant)
	}
	p := t.cfg.Default
	p.Name, p.Default = tenant, true
	return p, nil
}
