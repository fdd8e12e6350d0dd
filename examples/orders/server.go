package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/fenceguard/pgfence"
)

// Bounds on what a request may carry.
const (
	maxBody    = 64 << 10 // an order is a few dozen bytes
	maxItem    = 200      // bytes
	maxQty     = 1_000_000
	queueSize  = 1024  // async writes waiting for the worker; beyond, 503
	keepJobs   = 10000 // outcomes kept for GET /jobs/{id}
	jobTimeout = 10 * time.Second
)

// order is the body of PUT /orders/{id}.
type order struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

// job is an async write waiting for the worker.
type job struct {
	id    int64
	fence fenceguard.Fence
	order int64
	o     order
}

// outcome is what GET /jobs/{id} answers.
type outcome struct {
	State     string `json:"state"` // pending, applied, refused, failed
	Reason    string `json:"reason,omitempty"`
	Presented string `json:"presented,omitempty"`
	Current   string `json:"current,omitempty"`
}

type server struct {
	db         *pgxpool.Pool
	table      string // quoted
	fences     pgfence.Table
	mux        *http.ServeMux
	log        *slog.Logger
	queueDelay time.Duration // a slow queue, for the demo: the worker waits this long before each commit
	// drainNow, closed by POST /jobs/drain (and replaced), ends the
	// worker's wait at once: the demo says when its queued write commits,
	// rather than racing a fixed delay on a loaded machine.
	drainNow chan struct{}

	queue chan job
	done  chan struct{}

	mu      sync.Mutex
	nextJob int64
	jobs    map[int64]*outcome
}

// config is what the server is built from.
type config struct {
	Table      string                   // the orders table; its fence table is Table + "_fences"
	Proofs     fenceguard.ProofVerifier // nil: writes need no signed proof
	QueueDelay time.Duration
	Log        *slog.Logger
}

// newServer creates the tables if needed and starts the async worker
// (stopped by Close).
func newServer(ctx context.Context, db *pgxpool.Pool, c config) (*server, error) {
	table, proofs, log := c.Table, c.Proofs, c.Log
	s := &server{db: db, table: pgx.Identifier{table}.Sanitize(), fences: pgfence.Table{Name: table + "_fences"},
		mux: http.NewServeMux(), log: log, queueDelay: c.QueueDelay, queue: make(chan job, queueSize), done: make(chan struct{}), jobs: map[int64]*outcome{},
		drainNow: make(chan struct{})}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (id bigint PRIMARY KEY, item text NOT NULL, qty int NOT NULL, fence bigint NOT NULL)`); err != nil {
		return nil, fmt.Errorf("create %s: %w", table, err)
	}
	if err := s.fences.Create(ctx, db); err != nil {
		return nil, err
	}

	guard := fenceguard.New(fenceguard.Options{Key: orderKey, Proofs: proofs, Log: log})
	s.mux.Handle("PUT /orders/{id}", guard.Wrap(http.HandlerFunc(s.putOrder)))
	s.mux.HandleFunc("GET /orders/{id}", s.getOrder)
	s.mux.HandleFunc("GET /jobs/{id}", s.getJob)
	s.mux.HandleFunc("POST /jobs/drain", s.drain)
	go s.work()
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops the worker once it has committed every queued write. Call it
// after the HTTP server has shut down (no more writes are queued).
func (s *server) Close() {
	close(s.queue)
	<-s.done
}

// orderID parses a canonical decimal order id (the edge's {2:int}).
func orderID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, errors.New("not an order id")
	}
	return n, nil
}

// orderKey is the lock key of the order a request writes: the same key the
// edge's route derives from the path (orders/{2:int}).
func orderKey(r *http.Request) (string, error) {
	id, err := orderID(r)
	if err != nil {
		return "", err
	}
	return "orders/" + strconv.FormatInt(id, 10), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *server) putOrder(w http.ResponseWriter, r *http.Request) {
	id, _ := orderID(r) // the guard's Key already parsed it
	var o order
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || o.Item == "" || len(o.Item) > maxItem || !utf8.ValidString(o.Item) || o.Qty < 1 || o.Qty > maxQty {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("want {\"item\": 1 to %d bytes, \"qty\": 1 to %d}", maxItem, maxQty)})
		return
	}
	f, _ := fenceguard.FromContext(r.Context())

	if r.Header.Get("Prefer") == "respond-async" {
		s.mu.Lock()
		s.nextJob++
		j := job{id: s.nextJob, fence: f, order: id, o: o}
		select {
		case s.queue <- j:
			s.jobs[j.id] = &outcome{State: "pending"}
			delete(s.jobs, j.id-keepJobs)
			s.mu.Unlock()
		default:
			s.mu.Unlock()
			fenceguard.Refuse(w, r, fenceguard.ReasonUnavailable, "")
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/jobs/%d", j.id))
		writeJSON(w, http.StatusAccepted, map[string]string{"job": strconv.FormatInt(j.id, 10)})
		return
	}

	res, err := s.commit(r.Context(), f, id, o)
	switch {
	case err != nil:
		s.log.Error("orders: commit failed", "error", err)
		fenceguard.Refuse(w, r, fenceguard.ReasonUnavailable, "")
	case !res.Applied:
		fenceguard.RefuseStale(w, r, res) // 409, the edge's body, naming the newer fence
	default:
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "item": o.Item, "qty": o.Qty, "fence": f.Fence})
	}
}

// commit writes the order and its fence in one transaction, unless a newer
// fence has already committed for the order.
func (s *server) commit(ctx context.Context, f fenceguard.Fence, id int64, o order) (fenceguard.Result, error) {
	fence, err := strconv.ParseInt(f.Fence, 10, 64)
	if err != nil {
		return fenceguard.Result{}, err
	}
	return s.fences.Commit(ctx, s.db, f.Key, f.Fence, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (id, item, qty, fence) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET item = EXCLUDED.item, qty = EXCLUDED.qty, fence = EXCLUDED.fence`, id, o.Item, o.Qty, fence)
		return err
	})
}

// work commits queued writes, in order, until Close.
func (s *server) work() {
	defer close(s.done)
	for j := range s.queue {
		s.mu.Lock()
		now := s.drainNow
		s.mu.Unlock()
		t := time.NewTimer(s.queueDelay)
		select {
		case <-t.C:
		case <-now:
		}
		t.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
		res, err := s.commit(ctx, j.fence, j.order, j.o)
		cancel()
		out := outcome{State: "applied"}
		switch {
		case err != nil:
			s.log.Error("orders: async commit failed", "error", err)
			out = outcome{State: "failed", Reason: string(fenceguard.ReasonUnavailable)}
		case !res.Applied:
			out = outcome{State: "refused", Reason: string(fenceguard.ReasonStale), Presented: res.Fence, Current: res.Stored}
		}
		s.mu.Lock()
		if o, ok := s.jobs[j.id]; ok {
			*o = out
		}
		s.mu.Unlock()
	}
}

// drain makes the worker commit the writes queued so far without its
// delay (the demo's "now", after B's write).
func (s *server) drain(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	close(s.drainNow)
	s.drainNow = make(chan struct{})
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) getOrder(w http.ResponseWriter, r *http.Request) {
	id, err := orderID(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var o order
	var fence int64
	err = s.db.QueryRow(r.Context(), `SELECT item, qty, fence FROM `+s.table+` WHERE id = $1`, id).Scan(&o.Item, &o.Qty, &fence)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such order"})
	case err != nil:
		s.log.Error("orders: read failed", "error", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "unavailable"})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "item": o.Item, "qty": o.Qty, "fence": fmt.Sprintf("%015d", fence)})
	}
}

func (s *server) getJob(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	s.mu.Lock()
	o, ok := s.jobs[id]
	var out outcome
	if ok {
		out = *o
	}
	s.mu.Unlock()
	if err != nil || !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such job"})
		return
	}
	writeJSON(w, http.StatusOK, out)
}
