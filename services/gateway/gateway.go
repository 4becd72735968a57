// Package gateway is Switchyard's OpenAI-compatible HTTP front door: a
// stateless net/http shell that authenticates an API key to a tenant,
// submits the request on sy.submit.<tenant>, relays the request's token
// chunks (sy.tok.<tenant>.<id>) as server-sent events, answers with the
// final result from RESULTS, and cancels the request on the bus when the
// client goes away. Every decision (mapping, routing context, error
// statuses) is in internal/adapter/gateway; any number of replicas can run behind
// a load balancer because all state lives in NATS.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-ai/switchyard/internal/adapter/fleetlearn"
	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/internal/core/routing"
	"github.com/switchyard-ai/switchyard/schemas"
	"github.com/switchyard-ai/switchyard/services/client"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Config configures a Server.
type Config struct {
	NC   *nats.Conn
	Keys gw.Keys
	// Models is what GET /v1/models lists; nil means catalog.Default().
	Models []catalog.Model
	// Fleet adds the models live workers serve (their heartbeats) to
	// GET /v1/models, so a model only the fleet knows — an engine's own
	// model behind --backend openai — is listed as it is served. nil means
	// the gateway follows the heartbeats on NC itself.
	Fleet  *fleetlearn.Fleet
	Logger *slog.Logger
	// DefaultMaxTokens applies when a body sets no max_tokens.
	DefaultMaxTokens int
	// MaxWait bounds how long a request without a deadline is waited for.
	MaxWait time.Duration
	// DeadlineGrace is how long past a request's deadline the gateway waits
	// for the system's own deadline_exceeded result before it answers 504
	// itself and cancels: the admitter and workers enforce deadlines, the
	// gateway only refuses to hang when they cannot answer.
	DeadlineGrace time.Duration
	// MaxBodyBytes bounds a request body (files have their own bound).
	MaxBodyBytes int64
	// MaxFileBytes bounds an uploaded batch input file.
	MaxFileBytes int64
	// PollInterval is how often a waiting request also looks in RESULTS
	// directly, in case its result was published while the connection was
	// reconnecting and the live subscription missed it.
	PollInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Metrics receives the gateway's series (metrics.go); nil keeps them
	// in a set of the server's own, which Metrics() returns.
	Metrics *metrics.Set
}

func (c Config) withDefaults() Config {
	if c.Models == nil {
		c.Models = catalog.Default().Models()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = gw.DefaultMaxTokens
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 10 * time.Minute
	}
	if c.DeadlineGrace <= 0 {
		// Past the router's own overdue grace, with a second for the
		// result to travel: the system answers an overdue request itself
		// (deadline_exceeded), and the HTTP client must get that answer,
		// not a 504 from a gateway that stopped waiting first.
		c.DeadlineGrace = routing.OverdueGrace + time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = int64(schemas.DefaultLimits.MaxPromptBytes) + 1<<20
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 200 << 20
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	return c
}

// Server serves the OpenAI-compatible API.
type Server struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
	log    *slog.Logger
	batch  *batchAPI
	mux    *http.ServeMux
	stats  *gatewayMetrics

	resultsMu sync.Mutex
	results   jetstream.Stream // RESULTS, looked up on first use
}

// New builds a Server on an open connection. The streams must already be
// provisioned (subjects.Provision), as for every service.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.NC == nil {
		return nil, errors.New("gateway: no NATS connection")
	}
	js, err := jetstream.New(cfg.NC, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return nil, fmt.Errorf("gateway jetstream: %w", err)
	}
	// JSON on the bus: a person reading SUBMIT with `nats sub` sees what
	// the HTTP client sent.
	cl, err := client.New(cfg.NC, client.WithJSON())
	if err != nil {
		return nil, err
	}
	if cfg.Fleet == nil {
		if cfg.Fleet, err = fleetlearn.Follow(cfg.NC, fleetlearn.Options{Log: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("gateway: follow heartbeats: %w", err)
		}
	}
	names := make([]string, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		names = append(names, m.Name)
	}
	s := &Server{cfg: cfg, nc: cfg.NC, js: js, client: cl, log: cfg.Logger, stats: newGatewayMetrics(cfg.Metrics, names)}
	if s.batch, err = newBatchAPI(ctx, s); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.auth(s.chat))
	mux.HandleFunc("POST /v1/completions", s.auth(s.completion))
	mux.HandleFunc("GET /v1/models", s.auth(s.listModels))
	mux.HandleFunc("GET /v1/models/{model}", s.auth(s.getModel))
	s.batch.register(mux)
	mux.HandleFunc("GET /healthz", s.health)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A path that exists under another method is a 405 naming the
		// methods it takes, as HTTP asks, not a 404 that says the
		// endpoint is missing (GET /v1/chat/completions).
		if allow := s.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, gw.NewError(http.StatusMethodNotAllowed, gw.TypeInvalidRequest, gw.CodeMethodNotAllowed, "",
				fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))))
			return
		}
		writeError(w, gw.NewError(http.StatusNotFound, gw.TypeNotFound, gw.CodeNotFound, "", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)))
	})
	s.mux = mux
	return s, nil
}

// allowed lists the methods r's path is routed for, asking the mux itself
// so the answer cannot drift from the routes registered.
func (s *Server) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
		}
	}
	return out
}

// Handler is the HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

type ctxKey struct{}

func tenantOf(r *http.Request) string { t, _ := r.Context().Value(ctxKey{}).(string); return t }

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := gw.BearerKey(r.Header.Get("Authorization"))
		if !ok {
			s.refuseKey(w, r, "missing API key: send Authorization: Bearer <key>")
			return
		}
		tenant, ok := s.cfg.Keys.Tenant(key)
		if !ok {
			s.refuseKey(w, r, "incorrect API key provided")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, tenant)))
	}
}

// refuseKey answers 401 and, for a completion, counts it: a client whose
// key is wrong is a request the gateway refused, and a dashboard of
// requests by status that left it out would hide a broken deployment.
func (s *Server) refuseKey(w http.ResponseWriter, r *http.Request, msg string) {
	if r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions" {
		s.stats.record(observation{status: http.StatusUnauthorized, start: s.cfg.Now()}, s.cfg.Now())
	}
	writeError(w, gw.Unauthorized(msg))
}

// busDown answers 503 bus_unavailable at once when the connection to NATS
// is not up, rather than after a publish's ack timeout (11 s measured):
// nothing the request needs can happen until it is back.
func (s *Server) busDown(w http.ResponseWriter) bool {
	if st := s.nc.Status(); st != nats.CONNECTED {
		e := gw.NewError(http.StatusServiceUnavailable, gw.TypeServer, gw.CodeUnavailable, "", "not connected to NATS ("+st.String()+"); retry")
		e.RetryAfter = 1
		writeError(w, e)
		return true
	}
	return false
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.nc.Status() != nats.CONNECTED {
		writeError(w, gw.NewError(http.StatusServiceUnavailable, gw.TypeServer, gw.CodeUnavailable, "", "not connected to NATS: "+s.nc.Status().String()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"status":"ok"}`)
}

// modelList is the catalog's models, then those the live fleet serves
// that the catalog does not name: a request for a fleet-only model is
// answered, so it is listed too.
func (s *Server) modelList() gw.ModelList {
	l := gw.Models(s.cfg.Models)
	listed := make(map[string]bool, len(l.Data))
	for _, m := range l.Data {
		listed[strings.ToLower(m.ID)] = true
	}
	for _, m := range s.cfg.Fleet.Models() {
		if !listed[strings.ToLower(m.Name)] {
			l.Data = append(l.Data, gw.ModelObject{ID: m.Name, Object: gw.ObjectModel, OwnedBy: "switchyard", MaxContext: m.ContextLength})
		}
	}
	return l
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.modelList())
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	for _, m := range s.modelList().Data {
		if m.ID == name {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, gw.NewError(http.StatusNotFound, gw.TypeNotFound, gw.CodeModelNotFound, "model", fmt.Sprintf("the model %q does not exist", name)))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"response encoding failed","type":"server_error","param":null,"code":"internal"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func writeError(w http.ResponseWriter, e gw.APIError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, e.Body)
}

// readBody reads a bounded body; an oversized one is a 413.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *gw.APIError) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			e := gw.NewError(http.StatusRequestEntityTooLarge, gw.TypeInvalidRequest, schemas.CodeOversized, "", fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
			return nil, &e
		}
		e := gw.BadRequest(schemas.CodeMalformed, "", "reading request body: "+err.Error())
		return nil, &e
	}
	return data, nil
}

// publishCancel tells workers and routers to stop on id. It runs after the
// HTTP request's context is done, so it gets its own short deadline.
func (s *Server) publishCancel(tenant, id, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := schemas.Cancel{V: schemas.Version, RequestID: id, Tenant: tenant, Reason: reason, At: s.cfg.Now().UTC()}
	msg := nats.NewMsg(subjects.Cancel(tenant))
	msg.Data = schemas.MustMarshal(schemas.JSON, c)
	msg.Header.Set(schemas.HeaderContentType, schemas.ContentJSON)
	msg.Header.Set(schemas.HeaderMsgID, "cancel-"+id)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		s.log.Warn("cancel publish failed", "tenant", tenant, "id", id, "reason", reason, "err", err)
		return
	}
	s.log.Info("cancelled", "tenant", tenant, "id", id, "reason", reason)
}
