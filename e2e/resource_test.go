package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/deploy/nginx/nginxtest"
	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/fenceguard/pgfence"
	"github.com/fencegate/fencegate/fenceguard/redisfence"
	"github.com/fencegate/fencegate/writeproof"
)

// The proof of issue 22: the resource-side check (fenceguard with pgfence
// or redisfence) makes the last step exact behind an edge that cannot keep
// the write barrier. Through the real fencegate binary (on PostgreSQL, with
// proof keys) and the real nginx with the shipped forward-auth config,
// holders hand keys over every 150–400 ms while their writes are in flight;
// the API holds every write 0–300 ms between the edge's check and its
// commit, and answers one write in four at once (202) and commits it later.
// The store records every commit in the order it committed (PostgreSQL: in
// the row itself, in the write's own transaction; Redis: under a per-key
// mutex taken around the one Redis call that commits). Without the helper,
// commits of a key go backwards in fence order; with it, never, and every
// write it refused got an answer (409 stale naming the newer fence, or the
// job's outcome). A write sent straight to the API, past the edge, with a
// replayed or forged fence is refused by the API itself.

// resourceStore is where the API commits: the helper or a plain write.
type resourceStore interface {
	// commit writes under f.Fence for f.Key; applied false: refused stale.
	commit(ctx context.Context, f fenceguard.Fence) (fenceguard.Result, error)
	// histories returns, per key, the fences committed in commit order.
	histories(t *testing.T) map[string][]string
}

// pgResource keeps one row per key, whose history column each write
// appends to in its own transaction: the array is the commit order.
type pgResource struct {
	db     *pgxpool.Pool
	table  string
	fences *pgfence.Table // nil: the API without the helper
}

func newPGResource(t *testing.T, helper bool) *pgResource {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(need(t, "DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 64
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	ns := "e2e_res_" + randHex(4)
	r := &pgResource{db: db, table: ns + "_orders"}
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE `+r.table+` (key text PRIMARY KEY, history bigint[] NOT NULL DEFAULT '{}')`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+r.table+`, `+ns+`_fences`) })
	if helper {
		r.fences = &pgfence.Table{Name: ns + "_fences"}
		if err := r.fences.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *pgResource) appendHistory(ctx context.Context, q pgfence.Querier, f fenceguard.Fence) error {
	n, err := strconv.ParseInt(f.Fence, 10, 64)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `INSERT INTO `+r.table+` (key, history) VALUES ($1, ARRAY[$2::bigint])
		ON CONFLICT (key) DO UPDATE SET history = `+r.table+`.history || $2::bigint`, f.Key, n)
	return err
}

func (r *pgResource) commit(ctx context.Context, f fenceguard.Fence) (fenceguard.Result, error) {
	if r.fences == nil {
		return fenceguard.Result{Applied: true, Fence: f.Fence, Stored: f.Fence}, r.appendHistory(ctx, r.db, f)
	}
	return r.fences.Commit(ctx, r.db, f.Key, f.Fence, func(tx pgx.Tx) error { return r.appendHistory(ctx, tx, f) })
}

func (r *pgResource) histories(t *testing.T) map[string][]string {
	t.Helper()
	rows, err := r.db.Query(context.Background(), `SELECT key, history FROM `+r.table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var key string
		var h []int64
		if err := rows.Scan(&key, &h); err != nil {
			t.Fatal(err)
		}
		for _, n := range h {
			out[key] = append(out[key], fmt.Sprintf("%015d", n))
		}
	}
	return out
}

// redisResource sets one Redis key per lock key; the history is recorded
// under a per-key mutex held around the one Redis call that commits, so
// it is Redis's order.
type redisResource struct {
	rdb    *redis.Client
	prefix string
	helper bool

	mu   sync.Mutex
	keys map[string]*sync.Mutex
	hist map[string][]string
}

func newRedisResource(t *testing.T, helper bool) *redisResource {
	t.Helper()
	o, err := redis.ParseURL(need(t, "REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return &redisResource{rdb: rdb, prefix: "e2e_res_" + randHex(4) + ":", helper: helper,
		keys: map[string]*sync.Mutex{}, hist: map[string][]string{}}
}

func (r *redisResource) commit(ctx context.Context, f fenceguard.Fence) (fenceguard.Result, error) {
	r.mu.Lock()
	km := r.keys[f.Key]
	if km == nil {
		km = &sync.Mutex{}
		r.keys[f.Key] = km
	}
	r.mu.Unlock()
	km.Lock()
	defer km.Unlock()
	res := fenceguard.Result{Applied: true, Fence: f.Fence, Stored: f.Fence}
	var err error
	if r.helper {
		res, err = redisfence.Set(ctx, r.rdb, redisfence.Write{Key: r.prefix + f.Key, Fence: f.Fence, Value: f.Fence})
	} else {
		err = r.rdb.Set(ctx, r.prefix+f.Key, f.Fence, 0).Err()
	}
	if err == nil && res.Applied {
		r.mu.Lock()
		r.hist[f.Key] = append(r.hist[f.Key], f.Fence)
		r.mu.Unlock()
	}
	return res, err
}

func (r *redisResource) histories(*testing.T) map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for k, h := range r.hist {
		out[k] = slices.Clone(h)
	}
	return out
}

// jobOutcome is what GET /jobs/{id} answers for a write committed after
// the API answered it.
type jobOutcome struct {
	State     string `json:"state"` // "pending", "applied", "refused", "failed"
	Reason    string `json:"reason,omitempty"`
	Presented string `json:"presented,omitempty"`
	Current   string `json:"current,omitempty"`
}

// resourceAPI is the protected API: PUT /orders/{id} behind fenceguard,
// held 0–maxHold, then committed (or, with "Prefer: respond-async",
// answered 202 at once and committed after the hold).
type resourceAPI struct {
	store   resourceStore
	maxHold time.Duration

	pending sync.WaitGroup
	mu      sync.Mutex
	jobs    map[string]*jobOutcome
	nextJob int

	applied, refusedSync, refusedAsync, failed atomic.Int64
}

func newResourceAPI(store resourceStore, keys fenceguard.ProofVerifier) (*resourceAPI, http.Handler) {
	api := &resourceAPI{store: store, maxHold: 300 * time.Millisecond, jobs: map[string]*jobOutcome{}}
	g := fenceguard.New(fenceguard.Options{
		Key:    func(r *http.Request) (string, error) { return "orders/" + r.PathValue("id"), nil },
		Proofs: keys,
	})
	mux := http.NewServeMux()
	mux.Handle("PUT /orders/{id}", g.Wrap(http.HandlerFunc(api.put)))
	mux.HandleFunc("GET /jobs/{id}", api.job)
	return api, mux
}

func (a *resourceAPI) put(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
	f, _ := fenceguard.FromContext(r.Context())
	hold := rand.N(a.maxHold + 1)
	if r.Header.Get("Prefer") == "respond-async" {
		a.mu.Lock()
		a.nextJob++
		id := strconv.Itoa(a.nextJob)
		job := &jobOutcome{State: "pending"}
		a.jobs[id] = job
		a.mu.Unlock()
		a.pending.Add(1)
		go func() { // a queue's worker: commits after the answer
			defer a.pending.Done()
			time.Sleep(hold)
			res, err := a.store.commit(context.Background(), f)
			a.mu.Lock()
			defer a.mu.Unlock()
			switch {
			case err != nil:
				a.failed.Add(1)
				job.State, job.Reason = "failed", err.Error()
			case res.Applied:
				a.applied.Add(1)
				job.State = "applied"
			default:
				a.refusedAsync.Add(1)
				*job = jobOutcome{State: "refused", Reason: string(fenceguard.ReasonStale), Presented: res.Fence, Current: res.Stored}
			}
		}()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"job":%q}`, id)
		return
	}
	time.Sleep(hold)
	res, err := a.store.commit(r.Context(), f)
	switch {
	case err != nil:
		a.failed.Add(1)
		fenceguard.Refuse(w, r, fenceguard.ReasonUnavailable, "")
	case !res.Applied:
		a.refusedSync.Add(1)
		fenceguard.RefuseStale(w, r, res)
	default:
		a.applied.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"fence":%q}`, f.Fence)
	}
}

func (a *resourceAPI) job(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	j, ok := a.jobs[r.PathValue("id")]
	var out jobOutcome
	if ok {
		out = *j
	}
	a.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// settle waits for every async commit.
func (a *resourceAPI) settle(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { a.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("async commits still pending after 30s")
	}
}

// backwards counts commits under a fence lower than one the key had
// already committed.
func backwards(hs map[string][]string) (commits, back int) {
	for _, h := range hs {
		top := ""
		for _, f := range h {
			commits++
			if f < top {
				back++
			}
			top = max(top, f)
		}
	}
	return commits, back
}

// resourceClients is what the writers saw.
type resourceClients struct {
	ok, accepted, edgeRefused, apiStale, unavailable, other atomic.Int64
	unclear                                                 atomic.Int64 // a 409 without a clear stale/not-held body
	mu                                                      sync.Mutex
	jobs                                                    []string
	handovers                                               atomic.Int64
}

// heldFence is a holder's fence and proof, which its writers use.
type heldFence struct{ fence, proof string }

// runResourceWorkload drives holders and writers through edge for d.
func runResourceWorkload(t *testing.T, gateway, edge string, keys int, d time.Duration, first []atomic.Pointer[heldFence]) *resourceClients {
	t.Helper()
	locks, err := client.New(gateway)
	if err != nil {
		t.Fatal(err)
	}
	hc := newWriteClient(32)
	defer hc.CloseIdleConnections()
	st := &resourceClients{}
	current := make([]atomic.Pointer[heldFence], keys)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	sleep := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	for h := range 2 * keys {
		k := h % keys
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("orders/%d", k)
			for ctx.Err() == nil {
				r, err := locks.Acquire(ctx, key, 1500*time.Millisecond)
				if err != nil || !r.OK {
					sleep(time.Duration(10+rand.IntN(30)) * time.Millisecond)
					continue
				}
				hf := &heldFence{r.Fence, r.Proof}
				first[k].CompareAndSwap(nil, hf)
				current[k].Store(hf)
				st.handovers.Add(1)
				sleep(150*time.Millisecond + rand.N(250*time.Millisecond))
				// Hand over while writes under this fence are in flight.
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, _ = locks.Release(rctx, r.LockID)
				rcancel()
			}
		}()
	}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := rand.IntN(keys)
				hf := current[k].Load()
				if hf == nil {
					sleep(10 * time.Millisecond)
					continue
				}
				hdr := http.Header{}
				hdr.Set(client.HeaderToken, hf.fence)
				hdr.Set(client.HeaderProof, hf.proof)
				if rand.IntN(4) == 0 {
					hdr.Set("Prefer", "respond-async")
				}
				rep, err := sendWrite(hc, edge+fmt.Sprintf("/orders/%d", k), hdr)
				if err != nil {
					st.other.Add(1)
					continue
				}
				switch rep.Status {
				case http.StatusOK:
					st.ok.Add(1)
				case http.StatusAccepted:
					st.accepted.Add(1)
					st.mu.Lock()
					st.jobs = append(st.jobs, fmt.Sprint(rep.JSON["job"]))
					st.mu.Unlock()
				case http.StatusConflict:
					// The edge's refusal (not-held, stale) or the API's
					// (stale, current naming the newer fence): both say why.
					reason, _ := rep.JSON["error"].(string)
					cur, _ := rep.JSON["current"].(string)
					switch {
					case reason == "stale" && cur > hf.fence && rep.JSON["decisionId"] == "":
						st.apiStale.Add(1)
					case reason == "stale" || reason == "not-held":
						st.edgeRefused.Add(1)
					default:
						st.unclear.Add(1)
					}
				case http.StatusServiceUnavailable:
					st.unavailable.Add(1)
				default:
					st.other.Add(1)
					t.Logf("write answered %d: %s", rep.Status, rep.Body)
				}
			}
		}()
	}
	wg.Wait()
	return st
}

// sendWrite PUTs a small body to url with hdr and reads the answer.
func sendWrite(hc *http.Client, url string, hdr http.Header) (Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(`{"qty":1}`))
	if err != nil {
		return Reply{}, err
	}
	req.Header = hdr
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	r := Reply{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	_ = json.Unmarshal(raw, &r.JSON)
	return r, err
}

// resourceGateway starts fencegate on PostgreSQL with a proof key.
func resourceGateway(t *testing.T) *Gateway {
	t.Helper()
	dir := t.TempDir()
	seed := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	writeFile(t, filepath.Join(dir, "k1.seed"), seed+"\n")
	cfg := filepath.Join(dir, "fencegate.yaml")
	// A check budget under nginx's 1 s auth timeout, generous for -race.
	writeFile(t, cfg, "check:\n  timeout: 600ms\nproof:\n  keys:\n    - {kid: k1, privateKeyFile: "+filepath.Join(dir, "k1.seed")+"}\n")
	return StartGateway(t, PostgresURL(t, "e2e_res_"+randHex(4)), "--log-level", "info", "--config", cfg, "--admission-addr", "off")
}

// TestResourceCheckThroughNginx is the proof, for PostgreSQL and Redis,
// with the helper and without it.
func TestResourceCheckThroughNginx(t *testing.T) {
	g := resourceGateway(t)
	keySet := fenceguard.NewKeySet(g.URL()+"/v1/proof/keys", fenceguard.KeySetOptions{})
	const keys = 4
	for _, c := range []struct {
		store  string
		helper bool
	}{
		{"postgres", true}, {"postgres", false}, {"redis", true}, {"redis", false},
	} {
		name := fmt.Sprintf("%s/helper=%v", c.store, c.helper)
		t.Run(name, func(t *testing.T) {
			var store resourceStore
			if c.store == "postgres" {
				store = newPGResource(t, c.helper)
			} else {
				store = newRedisResource(t, c.helper)
			}
			api, h := newResourceAPI(store, keySet)
			app := httptest.NewServer(h)
			defer app.Close()
			edge := nginxtest.Start(t, g.HTTP, strings.TrimPrefix(app.URL, "http://"))

			first := make([]atomic.Pointer[heldFence], keys)
			st := runResourceWorkload(t, g.URL(), edge, keys, 7*time.Second, first)
			api.settle(t)
			commits, back := backwards(store.histories(t))

			// Every job's outcome is final and clear.
			jobsApplied, jobsRefused := 0, 0
			for _, id := range st.jobs {
				r := Do(t, edge, Call{Method: http.MethodGet, Path: "/jobs/" + id})
				var out jobOutcome
				if r.Status != 200 || json.Unmarshal(r.Body, &out) != nil {
					t.Fatalf("GET /jobs/%s: %d %s", id, r.Status, r.Body)
				}
				switch {
				case out.State == "applied":
					jobsApplied++
				case out.State == "refused" && out.Reason == "stale" && out.Current > out.Presented:
					jobsRefused++
				default:
					t.Errorf("job %s: %+v, want applied, or refused stale naming a newer fence", id, out)
				}
			}
			t.Logf("%s: %d commits, %d backwards in fence order; API applied %d, refused %d stale before answering and %d after (jobs); clients: %d 200, %d 202, %d refused by the edge, %d refused 409 stale by the API, %d 503, %d other; %d handovers",
				name, commits, back, api.applied.Load(), api.refusedSync.Load(), api.refusedAsync.Load(),
				st.ok.Load(), st.accepted.Load(), st.edgeRefused.Load(), st.apiStale.Load(), st.unavailable.Load(), st.other.Load(), st.handovers.Load())
			fmt.Printf("resource check through nginx, %s: %d commits, %d backwards; refused %d (sync %d, async %d)\n",
				name, commits, back, api.refusedSync.Load()+api.refusedAsync.Load(), api.refusedSync.Load(), api.refusedAsync.Load())

			if commits < 200 || st.handovers.Load() < 20 || st.accepted.Load() == 0 {
				t.Errorf("workload too small: %d commits, %d handovers, %d async", commits, st.handovers.Load(), st.accepted.Load())
			}
			if n := api.failed.Load(); n != 0 {
				t.Errorf("%d commits failed", n)
			}
			if n := st.other.Load() + st.unclear.Load(); n != 0 {
				t.Errorf("%d writes answered without a clear reason", n)
			}
			if int64(commits) != api.applied.Load() {
				t.Errorf("%d commits recorded, the API applied %d", commits, api.applied.Load())
			}
			if !c.helper {
				if back == 0 {
					t.Errorf("without the helper no commit went backwards in fence order (of %d): the workload cannot show what the helper prevents", commits)
				}
				return
			}
			if back != 0 {
				t.Errorf("with the helper, %d of %d commits went backwards in fence order", back, commits)
			}
			if api.refusedSync.Load() == 0 || api.refusedAsync.Load() == 0 {
				t.Errorf("the helper refused %d writes before answering and %d after: the workload must make both happen", api.refusedSync.Load(), api.refusedAsync.Load())
			}
			// Every refusal got its answer: the synchronous ones as 409 stale
			// from the API, the asynchronous ones in their job.
			if st.apiStale.Load() != api.refusedSync.Load() || int64(jobsRefused) != api.refusedAsync.Load() {
				t.Errorf("the API refused %d/%d (sync/async), clients were told %d/%d", api.refusedSync.Load(), api.refusedAsync.Load(), st.apiStale.Load(), jobsRefused)
			}

			// Past the edge: a write straight to the API.
			hist := store.histories(t)
			bypass := func(what, path, fence, proof string, status int, reason string) {
				t.Helper()
				hdr := http.Header{"X-Fence-Verified": {fence}}
				if proof != "" {
					hdr.Set("X-Fence-Proof", proof)
				}
				r := Do(t, app.URL, Call{Method: http.MethodPut, Path: path, Body: "{}", Header: hdr})
				if r.Status != status || r.Header.Get("X-Fence-Reason") != reason {
					t.Errorf("bypass, %s: %d %q %s; want %d %s", what, r.Status, r.Header.Get("X-Fence-Reason"), r.Body, status, reason)
				}
			}
			old := first[0].Load()
			forger, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: bytes.Repeat([]byte{9}, ed25519.SeedSize)}})
			if err != nil {
				t.Fatal(err)
			}
			forged, _ := forger.Sign("orders/0", "000000009999999", "p8s1m66P1k_mBCcoO-Qe2Q")
			bypass("an earlier holder's fence and proof, replayed", "/orders/0", old.fence, old.proof, http.StatusConflict, "stale")
			bypass("a made-up fence, no proof", "/orders/0", "000000009999999", "", http.StatusForbidden, "bad-proof")
			bypass("a made-up fence, a forged proof", "/orders/0", "000000009999999", forged, http.StatusForbidden, "bad-proof")
			bypass("a made-up fence, a genuine proof for another fence", "/orders/0", "000000009999999", old.proof, http.StatusForbidden, "bad-proof")
			bypass("a genuine proof for another key", "/orders/1", old.fence, old.proof, http.StatusForbidden, "bad-proof")
			bypass("no fence at all", "/orders/0", "", "", http.StatusPreconditionRequired, "missing")
			if after := store.histories(t); !mapsEqual(hist, after) {
				t.Errorf("a write past the edge was committed")
			}
		})
	}
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
