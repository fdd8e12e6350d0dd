package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/admission"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

// The fixtures stamp objects with these: the key's first fence (superseded)
// and its second (held by a live lock), as seeded by newEnv.
const (
	testKey      = "orders/42"
	staleFence   = "000000000000001"
	currentFence = "000000000000002"
	gatewaySA    = "fencegate:fencegate" // namespace:name form
)

type env struct {
	store   *bolt.Store
	auditor *fencecheck.Auditor
	reg     *prometheus.Registry
	h       *admission.Handler
	holder  string // lockId of the live lock holding currentFence
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newEnv opens a real bolt store and issues two fences for testKey: the
// first lock is released (its fence is now stale), the second stays live.
// checkStore, when non-nil, is what the checker reads instead (audit still
// goes to the seeded store).
func newEnv(t *testing.T, o admission.Options, checkStore lockstore.Store) *env {
	t.Helper()
	ctx := context.Background()
	s := locktest.OpenBolt(t, locktest.FloorOff)
	first, err := s.Acquire(ctx, testKey, time.Minute)
	if err != nil || !first.OK || first.Fence != staleFence {
		t.Fatalf("seed acquire 1 = %+v, %v", first, err)
	}
	if r, err := s.Release(ctx, first.LockID); err != nil || !r.OK {
		t.Fatalf("seed release = %+v, %v", r, err)
	}
	second, err := s.Acquire(ctx, testKey, time.Minute)
	if err != nil || !second.OK || second.Fence != currentFence {
		t.Fatalf("seed acquire 2 = %+v, %v", second, err)
	}

	reg := prometheus.NewPedanticRegistry()
	aud := fencecheck.NewAuditor(s, fencecheck.AuditorOptions{Logger: discard(), Registerer: reg})
	t.Cleanup(func() { aud.Close() })
	if checkStore == nil {
		checkStore = s
	}
	c := fencecheck.New(checkStore, fencecheck.Options{Audit: aud, Registerer: reg, Logger: discard()})
	o.Registerer, o.Logger = reg, discard()
	h, err := admission.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return &env{store: s, auditor: aud, reg: reg, h: h, holder: second.LockID}
}

// audited flushes the auditor and returns what reached the store.
func (e *env) audited(t *testing.T) []lockstore.AuditEvent {
	t.Helper()
	if err := e.auditor.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := e.store.QueryAudit(context.Background(), lockstore.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(h http.Handler, body []byte, contentType string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, admission.Path+"?timeout=5s", bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// decodeReview checks the envelope the API server insists on and returns
// the response.
func decodeReview(t *testing.T, rec *httptest.ResponseRecorder, wantUID string) *admissionv1.AdmissionResponse {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d, want 200: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var out admissionv1.AdmissionReview
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v", err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
		t.Fatalf("response envelope %q %q", out.APIVersion, out.Kind)
	}
	if out.Request != nil {
		t.Fatal("response echoes the request")
	}
	if out.Response == nil || string(out.Response.UID) != wantUID {
		t.Fatalf("response uid mismatch: %+v, want %s", out.Response, wantUID)
	}
	return out.Response
}

func uidOf(t *testing.T, body []byte) string {
	t.Helper()
	var r struct {
		Request struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Request.UID
}

func TestReviews(t *testing.T) {
	type want struct {
		allowed   bool
		code      int32               // status.code of a denial
		reason    metav1.StatusReason // status.reason of a denial
		fcReason  fencecheck.Reason   // the fencegate reason (cause / metric / audit)
		decision  string              // metric decision label
		audited   int                 // audit events written
		warning   bool                // an admission warning is returned
		inMessage []string            // substrings of the denial message
	}
	deny := func(code int32, reason metav1.StatusReason, fc fencecheck.Reason, msg ...string) want {
		return want{code: code, reason: reason, fcReason: fc, decision: "deny", audited: 1, inMessage: msg}
	}
	allow := func(decision string) want { return want{allowed: true, decision: decision} }

	cases := []struct {
		fixture string
		opts    admission.Options
		want    want
	}{
		{"create-current", admission.Options{}, allow("allow")},
		{"create-stale", admission.Options{}, deny(409, metav1.StatusReasonConflict, fencecheck.ReasonStale,
			`key "orders/42"`, "presented "+staleFence, "current "+currentFence, "stale")},
		{"create-unknown-fence", admission.Options{}, deny(409, metav1.StatusReasonConflict, fencecheck.ReasonUnknown,
			"never issued", "presented 000000000000003", "current "+currentFence)},
		{"create-key-no-fence", admission.Options{}, deny(428, admission.StatusReasonPreconditionRequired, fencecheck.ReasonMissing,
			"no fence", "fencegate.io/fence", `key "orders/42"`, "presented none", "current none")},
		{"create-fence-no-key", admission.Options{}, deny(400, metav1.StatusReasonBadRequest, fencecheck.ReasonMalformed,
			"no key", "fencegate.io/key", "presented "+currentFence)},
		{"create-malformed-fence", admission.Options{}, deny(400, metav1.StatusReasonBadRequest, fencecheck.ReasonMalformed,
			"malformed", "presented 42")},
		{"create-ungoverned", admission.Options{}, allow("ungoverned")},
		{"update-current", admission.Options{}, allow("allow")},
		{"update-stale", admission.Options{}, deny(409, metav1.StatusReasonConflict, fencecheck.ReasonStale,
			`key "orders/42"`, "presented "+staleFence, "current "+currentFence)},
		// Removing the annotations does not escape the check: the key comes
		// from the old object and the new one presents no fence.
		{"update-strips-annotations", admission.Options{}, deny(428, admission.StatusReasonPreconditionRequired, fencecheck.ReasonMissing,
			`key "orders/42"`)},
		// Re-keying is judged against the old key: the current fence of
		// orders/42 is presented, so it passes (with a stale one it would not).
		{"update-rekey", admission.Options{}, allow("allow")},
		{"update-opt-in", admission.Options{}, allow("allow")},
		{"delete-stale", admission.Options{}, deny(409, metav1.StatusReasonConflict, fencecheck.ReasonStale,
			"presented "+staleFence, "current "+currentFence)},
		{"delete-current", admission.Options{}, allow("allow")},
		// dryRun requests are decided as usual, but leave no audit event.
		{"update-stale-dryrun", admission.Options{}, want{code: 409, reason: metav1.StatusReasonConflict,
			fcReason: fencecheck.ReasonStale, decision: "deny", audited: 0}},
		{"update-stale-exempt-user", admission.Options{ExemptUsers: []string{"oncall@example.com"}}, allow("exempt")},
		{"update-stale-exempt-user", admission.Options{}, deny(409, metav1.StatusReasonConflict, fencecheck.ReasonStale)},
		{"update-stale", admission.Options{ExemptGroups: []string{"system:serviceaccounts:shop"}}, allow("exempt")},
		{"update-stale-gateway-sa", admission.Options{ServiceAccount: gatewaySA}, allow("exempt")},
		{"create-stale-secret", admission.Options{Resources: []admission.Resource{{Resource: "configmaps"}}}, allow("ungoverned")},
		{"create-stale-secret", admission.Options{Resources: []admission.Resource{{Resource: "secrets"}}},
			deny(409, metav1.StatusReasonConflict, fencecheck.ReasonStale)},
		// A rule without a subresource does not govern /status.
		{"update-stale-deployment-status", admission.Options{Resources: []admission.Resource{{Group: "apps", Resource: "deployments"}}},
			allow("ungoverned")},
		{"update-stale-deployment-status", admission.Options{Resources: []admission.Resource{{Group: "apps", Resource: "deployments/*"}}},
			deny(409, metav1.StatusReasonConflict, fencecheck.ReasonStale)},
		{"connect-exec", admission.Options{}, allow("ungoverned")},
		{"update-stale", admission.Options{Mode: fencecheck.ModeDryRun},
			want{allowed: true, fcReason: fencecheck.ReasonStale, decision: "would-deny", audited: 1}},
		{"update-stale", admission.Options{Mode: fencecheck.ModeWarn},
			want{allowed: true, fcReason: fencecheck.ReasonStale, decision: "would-deny", audited: 1, warning: true,
				inMessage: []string{"would be denied", "presented " + staleFence, "current " + currentFence}}},
		{"update-current", admission.Options{Policy: fencecheck.PolicyOff}, allow("allow")},
		{"update-stale", admission.Options{Policy: fencecheck.PolicyOff}, allow("allow")},
	}
	for _, tc := range cases {
		name := tc.fixture
		if tc.opts.Mode != "" || tc.opts.Policy != "" {
			name += "/" + string(tc.opts.Mode) + string(tc.opts.Policy)
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, tc.opts, nil)
			body := fixture(t, tc.fixture)
			uid := uidOf(t, body)
			resp := decodeReview(t, post(e.h, body, "application/json; charset=utf-8"), uid)
			w := tc.want

			if resp.Allowed != w.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, w.allowed, resp.Result)
			}
			var msg string
			if !w.allowed {
				r := resp.Result
				if r == nil || r.Code != w.code || r.Reason != w.reason || r.Status != metav1.StatusFailure {
					t.Fatalf("status = %+v, want code %d reason %s", r, w.code, w.reason)
				}
				if r.Details == nil || len(r.Details.Causes) != 1 ||
					r.Details.Causes[0].Type != metav1.CauseType("fencegate.io/"+string(w.fcReason)) {
					t.Fatalf("causes = %+v, want fencegate.io/%s", r.Details, w.fcReason)
				}
				msg = r.Message
			} else if resp.Result != nil {
				t.Fatalf("allowed response carries a status: %+v", resp.Result)
			}
			if w.warning != (len(resp.Warnings) == 1) {
				t.Fatalf("warnings = %q, want one: %v", resp.Warnings, w.warning)
			}
			if w.warning {
				msg = resp.Warnings[0]
			}
			for _, s := range w.inMessage {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q lacks %q", msg, s)
				}
			}
			if w.fcReason != "" && resp.AuditAnnotations["reason"] != string(w.fcReason) {
				t.Errorf("auditAnnotations = %v, want reason %s", resp.AuditAnnotations, w.fcReason)
			}

			op := strings.ToUpper(strings.SplitN(tc.fixture, "-", 2)[0])
			reason := string(w.fcReason)
			switch {
			case w.decision == "ungoverned" && tc.opts.Resources != nil:
				reason = "other-resource"
			case w.decision == "ungoverned" && op == "CONNECT":
				reason = "other-operation"
			case w.decision == "ungoverned":
				reason = "not-governed"
			case reason == "":
				reason = "none"
			}
			if got := testutil.ToFloat64(counter(t, e.reg, op, w.decision, reason)); got != 1 {
				t.Errorf("fencegate_admission_reviews_total{%s,%s,%s} = %v, want 1", op, w.decision, reason, got)
			}

			evs := e.audited(t)
			if len(evs) != w.audited {
				t.Fatalf("%d audit events, want %d: %+v", len(evs), w.audited, evs)
			}
			if w.audited == 1 {
				ev := evs[0]
				if ev.Source != "admission" || ev.Reason != string(w.fcReason) || ev.Method != op ||
					ev.KeyHash == "" || ev.Key != "" || ev.DecisionID != resp.AuditAnnotations["decision-id"] {
					t.Errorf("audit event %+v", ev)
				}
				// Paths are audited only with raw-key auditing (a path can
				// spell a key); the API server's audit log has the object URI.
				if ev.Path != "" {
					t.Errorf("audit path %q without raw-key auditing", ev.Path)
				}
			}
		})
	}
}

// counter fetches one series, failing when the metric family is missing
// (so a renamed metric cannot make the check vacuous).
func counter(t *testing.T, reg *prometheus.Registry, labels ...string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	for _, n := range []string{"fencegate_admission_reviews_total", "fencegate_admission_review_duration_seconds"} {
		if !names[n] {
			t.Fatalf("metric %s not registered", n)
		}
	}
	return &seriesCollector{reg: reg, labels: labels}
}

// seriesCollector exposes one fencegate_admission_reviews_total series to
// testutil.ToFloat64.
type seriesCollector struct {
	reg    *prometheus.Registry
	labels []string
}

func (c *seriesCollector) Describe(ch chan<- *prometheus.Desc) {}

func (c *seriesCollector) Collect(ch chan<- prometheus.Metric) {
	fams, _ := c.reg.Gather()
	for _, f := range fams {
		if f.GetName() != "fencegate_admission_reviews_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["operation"] == c.labels[0] && got["decision"] == c.labels[1] && got["reason"] == c.labels[2] {
				ch <- prometheus.MustNewConstMetric(
					prometheus.NewDesc("series", "", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
			}
		}
	}
}

func TestPolicyHolderVersusLatest(t *testing.T) {
	for _, tc := range []struct {
		policy  fencecheck.Policy
		allowed bool
	}{{fencecheck.PolicyHolder, false}, {fencecheck.PolicyLatest, true}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			e := newEnv(t, admission.Options{Policy: tc.policy}, nil)
			if r, err := e.store.Release(context.Background(), e.holder); err != nil || !r.OK {
				t.Fatalf("release = %+v, %v", r, err)
			}
			body := fixture(t, "update-current")
			resp := decodeReview(t, post(e.h, body, "application/json"), uidOf(t, body))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if !tc.allowed && (resp.Result.Code != 409 || !strings.Contains(resp.Result.Message, "not held")) {
				t.Fatalf("denial %+v, want 409 not held", resp.Result)
			}
		})
	}
}

// A backend that fails makes the webhook fail closed with 503, distinct from
// a stale denial, and the denial is still audited.
func TestBackendDownFailsClosed(t *testing.T) {
	broken := locktest.OpenBolt(t, locktest.FloorOff)
	if err := broken.Close(); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, admission.Options{}, broken)
	body := fixture(t, "update-current")
	resp := decodeReview(t, post(e.h, body, "application/json"), uidOf(t, body))
	if resp.Allowed || resp.Result.Code != 503 || resp.Result.Reason != metav1.StatusReasonServiceUnavailable {
		t.Fatalf("response %+v, want a 503 denial", resp.Result)
	}
	if !strings.Contains(resp.Result.Message, "failing closed") || !strings.Contains(resp.Result.Message, "presented "+currentFence) {
		t.Fatalf("message %q", resp.Result.Message)
	}
	if evs := e.audited(t); len(evs) != 1 || evs[0].Reason != "unavailable" {
		t.Fatalf("audit = %+v, want one unavailable event", evs)
	}
}

func TestUnusableRequests(t *testing.T) {
	valid := fixture(t, "create-current")
	cases := []struct {
		name        string
		method      string
		contentType string
		body        []byte
		maxBody     int64
		wantHTTP    int
		wantReason  string
		wantMessage string
	}{
		{"GET", http.MethodGet, "application/json", nil, 0, 405, "bad-method", "POST"},
		{"no content type", "", "", valid, 0, 415, "bad-content-type", "application/json"},
		{"yaml", "", "application/yaml", valid, 0, 415, "bad-content-type", "application/json"},
		{"protobuf", "", "application/vnd.kubernetes.protobuf", valid, 0, 415, "bad-content-type", "application/json"},
		{"oversize", "", "application/json", valid, 1024, 413, "too-large", "over 1024 bytes"},
		{"oversize default limit", "", "application/json",
			append(append([]byte(`{"pad":"`), bytes.Repeat([]byte("x"), admission.DefaultMaxBodyBytes)...), `"}`...), 0, 413, "too-large", ""},
		{"not JSON", "", "application/json", []byte(`{"kind": "AdmissionReview", `), 0, 400, "bad-review", "not an AdmissionReview"},
		{"JSON array", "", "application/json", []byte(`[1,2]`), 0, 400, "bad-review", "not an AdmissionReview"},
		{"empty body", "", "application/json", nil, 0, 400, "bad-review", "not an AdmissionReview"},
		{"v1beta1", "", "application/json", fixture(t, "wrong-version-v1beta1"), 0, 400, "bad-review", "admission.k8s.io/v1beta1"},
		{"wrong kind", "", "application/json", fixture(t, "wrong-kind"), 0, 400, "bad-review", `kind "ConfigMap"`},
		{"no uid", "", "application/json", fixture(t, "no-uid"), 0, 400, "bad-review", "no request uid"},
		{"no request", "", "application/json", fixture(t, "no-request"), 0, 400, "bad-review", "no request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, admission.Options{MaxBodyBytes: tc.maxBody}, nil)
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req := httptest.NewRequest(method, admission.Path, bytes.NewReader(tc.body))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			rec := httptest.NewRecorder()
			e.h.ServeHTTP(rec, req)
			if rec.Code != tc.wantHTTP {
				t.Fatalf("HTTP %d, want %d: %s", rec.Code, tc.wantHTTP, rec.Body)
			}
			var out struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Error.Message == "" {
				t.Fatalf("error body %q: %v", rec.Body, err)
			}
			if !strings.Contains(out.Error.Message, tc.wantMessage) {
				t.Errorf("message %q lacks %q", out.Error.Message, tc.wantMessage)
			}
			if tc.method == http.MethodGet && rec.Header().Get("Allow") != http.MethodPost {
				t.Errorf("Allow header %q", rec.Header().Get("Allow"))
			}
			if got := testutil.ToFloat64(counter(t, e.reg, "unknown", "error", tc.wantReason)); got != 1 {
				t.Errorf("error counter{%s} = %v, want 1", tc.wantReason, got)
			}
			if evs := e.audited(t); len(evs) != 0 {
				t.Errorf("unusable request audited: %+v", evs)
			}
		})
	}
}

func TestUndecodableObjectIsDenied(t *testing.T) {
	e := newEnv(t, admission.Options{}, nil)
	body := fixture(t, "object-not-an-object")
	resp := decodeReview(t, post(e.h, body, "application/json"), uidOf(t, body))
	if resp.Allowed || resp.Result.Code != 400 {
		t.Fatalf("response %+v, want a 400 denial", resp.Result)
	}
	if got := testutil.ToFloat64(counter(t, e.reg, "CREATE", "error", "bad-object")); got != 1 {
		t.Errorf("bad-object counter = %v", got)
	}
}

// panicky stands in for the checker to reach the recovery path, which no
// real checker should ever take.
type panicky struct{}

func (panicky) Check(context.Context, fencecheck.Request) (fencecheck.Decision, error) {
	panic("boom")
}

func TestPanicIsAFailClosedDenial(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := admission.New(panicky{}, admission.Options{Registerer: reg, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	body := fixture(t, "update-current")
	resp := decodeReview(t, post(h, body, "application/json"), uidOf(t, body))
	if resp.Allowed || resp.Result.Code != 500 {
		t.Fatalf("response %+v, want a 500 denial", resp.Result)
	}
	if got := testutil.ToFloat64(counter(t, reg, "UPDATE", "error", "panic")); got != 1 {
		t.Errorf("panic counter = %v", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	c := fencecheck.New(locktest.OpenBolt(t, locktest.FloorOff), fencecheck.Options{})
	cases := map[string]admission.Options{
		"same annotation": {Annotations: admission.Annotations{Key: "a.io/x", Fence: "a.io/x"}},
		"policy":          {Policy: "newest"},
		"mode":            {Mode: "loud"},
		"resource":        {Resources: []admission.Resource{{Group: "apps"}}},
		"service account": {ServiceAccount: "just-a-name"},
	}
	for name, o := range cases {
		if _, err := admission.New(c, o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	if _, err := admission.New(nil, admission.Options{}); err == nil {
		t.Error("New accepted a nil checker")
	}
	h, err := admission.New(c, admission.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !h.Ready() {
		t.Error("Ready() = false without a CertReady hook")
	}
	ready := false
	h, err = admission.New(c, admission.Options{CertReady: func() bool { return ready }, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if h.Ready() {
		t.Error("Ready() = true before the certificate")
	}
	ready = true
	if !h.Ready() {
		t.Error("Ready() = false after the certificate")
	}
}

// Custom annotation names are honoured, and the defaults are then ignored.
func TestCustomAnnotationNames(t *testing.T) {
	names := admission.Annotations{Key: "example.com/lock", Fence: "example.com/token"}
	e := newEnv(t, admission.Options{Annotations: names}, nil)
	body := fixture(t, "update-stale")
	resp := decodeReview(t, post(e.h, body, "application/json"), uidOf(t, body))
	if !resp.Allowed {
		t.Fatalf("default annotations governed the object under custom names: %+v", resp.Result)
	}
	renamed := strings.NewReplacer(`"fencegate.io/key"`, `"example.com/lock"`, `"fencegate.io/fence"`, `"example.com/token"`).Replace(string(body))
	resp = decodeReview(t, post(e.h, []byte(renamed), "application/json"), uidOf(t, body))
	if resp.Allowed || resp.Result.Code != 409 {
		t.Fatalf("custom annotations not governed: %+v", resp.Result)
	}
	if f := resp.Result.Details.Causes[0].Field; f != "metadata.annotations[example.com/token]" {
		t.Errorf("cause field %q", f)
	}
}

func TestReviewNilRequest(t *testing.T) {
	e := newEnv(t, admission.Options{}, nil)
	resp := e.h.Review(context.Background(), nil)
	if resp == nil || resp.Allowed || resp.Result.Code != 400 {
		t.Fatalf("Review(nil) = %+v, want a 400 denial", resp)
	}
}
