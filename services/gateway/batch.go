package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/switchyard-ai/switchyard/internal/adapter/batch"
	gw "github.com/switchyard-ai/switchyard/internal/adapter/gateway"
	"github.com/switchyard-ai/switchyard/schemas"
)

// FilesBucket is the JetStream Object Store bucket holding uploaded files,
// named <tenant>/<file-id> so one tenant can never read another's.
const FilesBucket = "sy_files"

// Output and error files of a batch are not stored: they are rendered on
// demand from RESULTS (internal/adapter/batch.Collect), which keeps the gateway
// stateless and the output always current. Their ids say which batch.
const (
	outputSuffix = "-output"
	errorSuffix  = "-errors"
)

// FileObject is OpenAI's file object.
type FileObject struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
}

// BatchObject is OpenAI's batch object.
type BatchObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           any               `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        int64             `json:"expires_at"`
	CompletedAt      *int64            `json:"completed_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    RequestCounts     `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
}

// ListObject is OpenAI's paginated list (files.list, batches.list).
type ListObject[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// DeletedFile is files.delete's answer.
type DeletedFile struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// RequestCounts is the batch object's request_counts.
type RequestCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// batchMeta is what OpenAI's batch object carries that internal/adapter/batch's
// record does not; it is kept beside the files.
type batchMeta struct {
	Endpoint    string            `json:"endpoint"`
	InputFileID string            `json:"input_file_id"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

type batchAPI struct {
	s     *Server
	files jetstream.ObjectStore
	store *batch.Store
}

func newBatchAPI(ctx context.Context, s *Server) (*batchAPI, error) {
	os, err := s.js.ObjectStore(ctx, FilesBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		os, err = s.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      FilesBucket,
			Description: "OpenAI Files API uploads (batch input files), <tenant>/<file-id>",
			// OpenAI keeps batch files 30 days.
			TTL: 30 * 24 * time.Hour,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			os, err = s.js.ObjectStore(ctx, FilesBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", FilesBucket, err)
	}
	st, err := batch.OpenStore(ctx, s.js, batch.StoreOptions{})
	if err != nil {
		return nil, err
	}
	return &batchAPI{s: s, files: os, store: st}, nil
}

func (b *batchAPI) register(mux *http.ServeMux) {
	// Every files and batches endpoint reads or writes JetStream: with the
	// bus down each answers 503 at once (busDown), not after a timeout.
	bus := func(h http.HandlerFunc) http.HandlerFunc {
		return b.s.auth(func(w http.ResponseWriter, r *http.Request) {
			if !b.s.busDown(w) {
				h(w, r)
			}
		})
	}
	mux.HandleFunc("POST /v1/files", bus(b.upload))
	mux.HandleFunc("GET /v1/files", bus(b.listFiles))
	mux.HandleFunc("GET /v1/files/{id}", bus(b.fileInfo))
	mux.HandleFunc("DELETE /v1/files/{id}", bus(b.deleteFile))
	mux.HandleFunc("GET /v1/files/{id}/content", bus(b.fileContent))
	mux.HandleFunc("POST /v1/batches", bus(b.create))
	mux.HandleFunc("GET /v1/batches", bus(b.list))
	mux.HandleFunc("GET /v1/batches/{id}", bus(b.get))
	mux.HandleFunc("POST /v1/batches/{id}/cancel", bus(b.cancel))
}

// metaPrefix names the batch metadata objects kept beside a tenant's
// uploads; they are not files a client uploaded, so files.list skips them.
const metaPrefix = "meta-"

// page applies OpenAI's cursor pagination (after = the last id of the
// previous page, limit 1-100 or 10000 for files, default 20 or 10000) to ids in order.
func page[T any](w http.ResponseWriter, r *http.Request, items []T, id func(T) string, defLimit, maxLimit int) (ListObject[T], bool) {
	limit := defLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			writeError(w, gw.BadRequest(schemas.CodeMalformed, "limit", fmt.Sprintf("limit must be an integer from 1 to %d, got %q", maxLimit, v)))
			return ListObject[T]{}, false
		}
		limit = n
	}
	if after := r.URL.Query().Get("after"); after != "" {
		i := slices.IndexFunc(items, func(t T) bool { return id(t) == after })
		if i < 0 {
			writeError(w, gw.BadRequest(schemas.CodeMalformed, "after", fmt.Sprintf("after %q names no object in this list", after)))
			return ListObject[T]{}, false
		}
		items = items[i+1:]
	}
	out := ListObject[T]{Object: "list", Data: items, HasMore: len(items) > limit}
	if out.HasMore {
		out.Data = items[:limit]
	}
	if out.Data == nil {
		out.Data = []T{}
	}
	if n := len(out.Data); n > 0 {
		first, last := id(out.Data[0]), id(out.Data[n-1])
		out.FirstID, out.LastID = &first, &last
	}
	return out, true
}

func (b *batchAPI) listFiles(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	purpose := r.URL.Query().Get("purpose")
	infos, err := b.files.List(r.Context())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		b.s.unavailable(w, "file store", err)
		return
	}
	var files []FileObject
	for _, info := range infos {
		id, mine := strings.CutPrefix(info.Name, tenant+"/")
		if !mine || strings.HasPrefix(id, metaPrefix) {
			continue
		}
		f := fileObject(id, info)
		if purpose != "" && f.Purpose != purpose {
			continue
		}
		files = append(files, f)
	}
	// Newest first, as OpenAI lists.
	slices.SortFunc(files, func(a, c FileObject) int {
		if a.CreatedAt != c.CreatedAt {
			return int(c.CreatedAt - a.CreatedAt)
		}
		return strings.Compare(c.ID, a.ID)
	})
	if out, ok := page(w, r, files, func(f FileObject) string { return f.ID }, 10000, 10000); ok {
		writeJSON(w, http.StatusOK, out)
	}
}

func (b *batchAPI) deleteFile(w http.ResponseWriter, r *http.Request) {
	tenant, id := tenantOf(r), r.PathValue("id")
	if _, _, ok := batchOfFile(id); ok {
		writeError(w, gw.BadRequest(schemas.CodeMalformed, "file_id", fmt.Sprintf("%s is a batch's output, rendered from its results on each read and not stored: there is nothing to delete", id)))
		return
	}
	if strings.HasPrefix(id, metaPrefix) {
		writeError(w, notFound("file", id))
		return
	}
	// Delete of an object already deleted succeeds in the object store;
	// OpenAI answers 404 for a file that is gone.
	if _, err := b.files.GetInfo(r.Context(), objectName(tenant, id)); err != nil {
		writeError(w, notFound("file", id))
		return
	}
	if err := b.files.Delete(r.Context(), objectName(tenant, id)); err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			writeError(w, notFound("file", id))
			return
		}
		b.s.unavailable(w, "file store", err)
		return
	}
	writeJSON(w, http.StatusOK, DeletedFile{ID: id, Object: "file", Deleted: true})
}

func (b *batchAPI) list(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	recs, err := b.store.List(r.Context(), tenant)
	if err != nil {
		b.s.unavailable(w, "batch store", err)
		return
	}
	// The counts are those of the last look (batch get, wait, results):
	// listing does not read every batch's results.
	objs := make([]BatchObject, 0, len(recs))
	for _, rec := range recs {
		objs = append(objs, b.object(r.Context(), rec, b.meta(r.Context(), tenant, rec.ID)))
	}
	if out, ok := page(w, r, objs, func(o BatchObject) string { return o.ID }, 20, 100); ok {
		writeJSON(w, http.StatusOK, out)
	}
}

func (b *batchAPI) cancel(w http.ResponseWriter, r *http.Request) {
	tenant, id := tenantOf(r), r.PathValue("id")
	rec, sent, err := batch.Cancel(r.Context(), b.s.js, b.store, id, tenant, "batch cancelled", b.s.cfg.Now())
	if err != nil {
		if errors.Is(err, batch.ErrNotFound) {
			writeError(w, notFound("batch", id))
			return
		}
		b.s.unavailable(w, "batch cancel", err)
		return
	}
	b.s.log.Info("batch cancel", "tenant", tenant, "batch", id, "cancels_sent", sent)
	writeJSON(w, http.StatusOK, b.object(r.Context(), rec, b.meta(r.Context(), tenant, id)))
}

func (b *batchAPI) meta(ctx context.Context, tenant, id string) batchMeta {
	var meta batchMeta
	if raw, err := b.files.GetBytes(ctx, objectName(tenant, metaPrefix+id)); err == nil {
		json.Unmarshal(raw, &meta)
	}
	return meta
}

func objectName(tenant, id string) string { return tenant + "/" + id }

func notFound(what, id string) gw.APIError {
	return gw.NewError(http.StatusNotFound, gw.TypeNotFound, gw.CodeNotFound, "", fmt.Sprintf("no such %s: %s", what, id))
}

func (b *batchAPI) upload(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	r.Body = http.MaxBytesReader(w, r.Body, b.s.cfg.MaxFileBytes)
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		writeError(w, gw.BadRequest(schemas.CodeMalformed, "file", "expected a multipart form with fields purpose and file: "+err.Error()))
		return
	}
	purpose := r.FormValue("purpose")
	if purpose != "batch" {
		writeError(w, gw.BadRequest(schemas.CodeMalformed, "purpose", fmt.Sprintf("purpose %q is not supported; this gateway stores batch input files (purpose=batch)", purpose)))
		return
	}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		writeError(w, gw.BadRequest(schemas.CodeMalformed, "file", "missing file field: "+err.Error()))
		return
	}
	defer f.Close()
	id := "file-" + nuid.Next()
	now := b.s.cfg.Now()
	info, err := b.files.Put(r.Context(), jetstream.ObjectMeta{
		Name: objectName(tenant, id),
		Metadata: map[string]string{
			"purpose": purpose, "filename": hdr.Filename, "tenant": tenant,
			"created_at": fmt.Sprint(now.Unix()),
		},
	}, f)
	if err != nil {
		b.s.unavailable(w, "file store", err)
		return
	}
	writeJSON(w, http.StatusOK, fileObject(id, info))
}

func fileObject(id string, info *jetstream.ObjectInfo) FileObject {
	var created int64
	fmt.Sscan(info.Metadata["created_at"], &created)
	return FileObject{ID: id, Object: "file", Bytes: int64(info.Size), CreatedAt: created,
		Filename: info.Metadata["filename"], Purpose: info.Metadata["purpose"], Status: "processed"}
}

// batchOfFile says whether id names a rendered batch output or error file.
func batchOfFile(id string) (batchID string, errorsFile bool, ok bool) {
	rest, found := strings.CutPrefix(id, "file-batch_")
	if !found {
		return "", false, false
	}
	if bid, ok := strings.CutSuffix(rest, outputSuffix); ok {
		return "batch_" + bid, false, true
	}
	if bid, ok := strings.CutSuffix(rest, errorSuffix); ok {
		return "batch_" + bid, true, true
	}
	return "", false, false
}

func (b *batchAPI) fileInfo(w http.ResponseWriter, r *http.Request) {
	tenant, id := tenantOf(r), r.PathValue("id")
	if bid, isErr, ok := batchOfFile(id); ok {
		data, rec, aerr := b.render(r.Context(), tenant, bid, isErr)
		if aerr != nil {
			writeError(w, *aerr)
			return
		}
		name := "output.jsonl"
		if isErr {
			name = "errors.jsonl"
		}
		writeJSON(w, http.StatusOK, FileObject{ID: id, Object: "file", Bytes: int64(len(data)), CreatedAt: rec.Created.Unix(),
			Filename: bid + "_" + name, Purpose: "batch_output", Status: "processed"})
		return
	}
	info, err := b.files.GetInfo(r.Context(), objectName(tenant, id))
	if err != nil {
		writeError(w, notFound("file", id))
		return
	}
	writeJSON(w, http.StatusOK, fileObject(id, info))
}

func (b *batchAPI) fileContent(w http.ResponseWriter, r *http.Request) {
	tenant, id := tenantOf(r), r.PathValue("id")
	var data []byte
	if bid, isErr, ok := batchOfFile(id); ok {
		var aerr *gw.APIError
		if data, _, aerr = b.render(r.Context(), tenant, bid, isErr); aerr != nil {
			writeError(w, *aerr)
			return
		}
	} else {
		var err error
		if data, err = b.files.GetBytes(r.Context(), objectName(tenant, id)); err != nil {
			writeError(w, notFound("file", id))
			return
		}
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Write(data)
}

// render produces a batch's output or error file from RESULTS.
func (b *batchAPI) render(ctx context.Context, tenant, batchID string, errorsFile bool) ([]byte, batch.Record, *gw.APIError) {
	rec, items, results, aerr := b.collect(ctx, tenant, batchID)
	if aerr != nil {
		return nil, rec, aerr
	}
	// Only the requests with a result: the files are named once every
	// request has one, and a look before that sees what is final so far.
	done := make([]batch.Item, 0, len(items))
	for _, it := range items {
		if _, ok := results[it.RequestID]; ok {
			done = append(done, it)
		}
	}
	var bad []batch.LineError
	if errorsFile {
		var err error
		if bad, err = b.store.LineErrors(ctx, rec); err != nil {
			e := gw.NewError(http.StatusServiceUnavailable, gw.TypeServer, gw.CodeUnavailable, "", err.Error())
			return nil, rec, &e
		}
	}
	// batch.WriteFiles, as `switchyard batch results` writes them: one
	// order for both files, the input's, whether a line failed to parse
	// or its request failed.
	var out, errs bytes.Buffer
	errOut := io.Writer(nil)
	if errorsFile {
		errOut = &errs
	}
	if _, err := batch.WriteFiles(&out, errOut, rec.ID, done, bad, results, false); err != nil {
		e := gw.NewError(http.StatusInternalServerError, gw.TypeServer, schemas.CodeInternal, "", "rendering batch "+rec.ID+": "+err.Error())
		return nil, rec, &e
	}
	if errorsFile {
		return errs.Bytes(), rec, nil
	}
	return out.Bytes(), rec, nil
}

func (b *batchAPI) collect(ctx context.Context, tenant, id string) (batch.Record, []batch.Item, map[string]schemas.Result, *gw.APIError) {
	rec, err := b.store.Get(ctx, id)
	if err != nil || rec.Tenant != tenant {
		e := notFound("batch", id)
		return rec, nil, nil, &e
	}
	items, err := b.store.Items(ctx, rec)
	if err == nil {
		var results map[string]schemas.Result
		if results, err = batch.Collect(ctx, b.s.js, rec, items, false, nil); err == nil {
			return rec, items, results, nil
		}
	}
	e := gw.NewError(http.StatusServiceUnavailable, gw.TypeServer, gw.CodeUnavailable, "", "reading batch "+id+": "+err.Error())
	return rec, nil, nil, &e
}

type createBatchBody struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

func (b *batchAPI) create(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	data, aerr := b.s.readBody(w, r)
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	var body createBatchBody
	if err := gw.DecodeJSON(data, &body); err != nil {
		writeError(w, gw.FromError(err))
		return
	}
	if body.Endpoint != batch.EndpointChat && body.Endpoint != batch.EndpointCompletion {
		writeError(w, gw.BadRequest(schemas.CodeMalformed, "endpoint", fmt.Sprintf("endpoint must be %s or %s", batch.EndpointChat, batch.EndpointCompletion)))
		return
	}
	if body.CompletionWindow != "" && body.CompletionWindow != "24h" {
		writeError(w, gw.BadRequest(schemas.CodeMalformed, "completion_window", "completion_window must be 24h"))
		return
	}
	content, err := b.files.GetBytes(r.Context(), objectName(tenant, body.InputFileID))
	if err != nil {
		writeError(w, notFound("file", body.InputFileID))
		return
	}
	id := batch.NewID(tenant, content)
	now := b.s.cfg.Now().UTC()
	meta := batchMeta{Endpoint: body.Endpoint, InputFileID: body.InputFileID, Metadata: body.Metadata}
	if rec, err := b.store.Get(r.Context(), id); err == nil && rec.Tenant == tenant && rec.Published == rec.Requests {
		// Same tenant, same bytes: the same batch, already submitted.
		b.respond(w, r.Context(), rec, meta, nil)
		return
	}
	items, bad, err := batch.Parse(bytes.NewReader(content), id, batch.Options{DefaultMaxTokens: b.s.cfg.DefaultMaxTokens})
	if err != nil {
		writeError(w, gw.BadRequest(schemas.CodeMalformed, "input_file_id", err.Error()))
		return
	}
	// A line for another endpoint than the batch's is refused, as OpenAI does.
	kept := items[:0]
	for _, it := range items {
		if it.URL != body.Endpoint {
			bad = append(bad, batch.LineError{Line: it.Line, CustomID: it.CustomID, Code: batch.CodeInvalidURL,
				Message: fmt.Sprintf("url %s does not match the batch endpoint %s", it.URL, body.Endpoint)})
			continue
		}
		kept = append(kept, it)
	}
	items = kept
	metaJSON, _ := json.Marshal(meta)
	if _, err := b.files.PutBytes(r.Context(), objectName(tenant, metaPrefix+id), metaJSON); err != nil {
		b.s.unavailable(w, "batch store", err)
		return
	}
	rec := batch.Record{ID: id, Tenant: tenant, Source: body.InputFileID, Created: now, Deadline: now.Add(batch.DefaultDeadline)}
	if rec, err = b.store.Create(r.Context(), rec, items, bad); err != nil {
		b.s.unavailable(w, "batch store", err)
		return
	}
	n, err := batch.Publish(r.Context(), b.s.client, tenant, items, nil)
	rec.Published = n
	if perr := b.store.Put(r.Context(), rec); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		b.s.unavailable(w, "batch submit", err)
		return
	}
	b.s.log.Info("batch submitted", "tenant", tenant, "batch", id, "requests", len(items), "invalid", len(bad))
	b.respond(w, r.Context(), rec, meta, map[string]schemas.Result{})
}

func (b *batchAPI) get(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r)
	rec, _, results, aerr := b.collect(r.Context(), tenant, r.PathValue("id"))
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	b.respond(w, r.Context(), rec, b.meta(r.Context(), tenant, rec.ID), results)
}

// respond tallies results into the record, saves it when the counts
// moved, and answers with the OpenAI batch object.
func (b *batchAPI) respond(w http.ResponseWriter, ctx context.Context, rec batch.Record, meta batchMeta, results map[string]schemas.Result) {
	now := b.s.cfg.Now()
	if results != nil {
		before := rec
		rec = batch.Tally(rec, results, now)
		if rec.Completed != before.Completed || rec.Failed != before.Failed || (rec.FinishedAt != nil) != (before.FinishedAt != nil) {
			if err := b.store.Put(ctx, rec); err != nil {
				b.s.log.Warn("batch record update failed", "batch", rec.ID, "err", err)
			}
		}
	}
	writeJSON(w, http.StatusOK, b.object(ctx, rec, meta))
}

// object is the OpenAI batch object of a record. The output file is named
// once the batch is done; the error file only when some line or request
// failed, as OpenAI leaves error_file_id null for a clean batch.
func (b *batchAPI) object(_ context.Context, rec batch.Record, meta batchMeta) BatchObject {
	now := b.s.cfg.Now()
	created := rec.Created.Unix()
	o := BatchObject{
		ID: rec.ID, Object: "batch", Endpoint: meta.Endpoint, InputFileID: rec.Source, CompletionWindow: "24h",
		Status: rec.State(now), CreatedAt: created, InProgressAt: &created, ExpiresAt: rec.Deadline.Unix(),
		RequestCounts: RequestCounts{Total: rec.Requests + rec.Invalid, Completed: rec.Completed, Failed: rec.Failed + rec.Invalid},
		Metadata:      meta.Metadata,
	}
	if rec.CancelledAt != nil {
		t := rec.CancelledAt.Unix()
		o.CancellingAt = &t
	}
	if rec.Finished() {
		if rec.FinishedAt != nil {
			t := rec.FinishedAt.Unix()
			if rec.CancelledAt != nil {
				o.CancelledAt = &t
			} else {
				o.CompletedAt = &t
			}
		}
		// An output file only when some request succeeded: a batch
		// cancelled before any answer, or of invalid lines only, has
		// none to name (OpenAI leaves output_file_id null then too).
		if rec.Completed > 0 {
			out := "file-" + rec.ID + outputSuffix
			o.OutputFileID = &out
		}
		if rec.Failed+rec.Invalid > 0 {
			errs := "file-" + rec.ID + errorSuffix
			o.ErrorFileID = &errs
		}
	}
	return o
}
