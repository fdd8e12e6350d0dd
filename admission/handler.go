package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
)

// Checker is the decision the handler asks; *fencecheck.Checker implements it.
type Checker interface {
	Check(ctx context.Context, r fencecheck.Request) (fencecheck.Decision, error)
}

var _ Checker = (*fencecheck.Checker)(nil)

// Handler answers AdmissionReviews. Review holds the decision; ServeHTTP is
// the defensive HTTP shell around it. It is safe for concurrent use.
type Handler struct {
	check Checker
	o     Options
	// route is the options' policy and mode, compiled once: every check's
	// Request is built by it (fencecheck.Route.WriteRequest).
	route *fencecheck.Route
	log   *slog.Logger
	m     *metrics
}

var _ http.Handler = (*Handler)(nil)

// Validate reports what New would refuse in o, without a Checker: for a
// process that checks its configuration before it opens its store.
func (o Options) Validate() error {
	_, err := o.validate()
	return err
}

// New returns a Handler deciding with c. It reports every invalid option.
func New(c Checker, o Options) (*Handler, error) {
	if c == nil {
		return nil, errors.New("admission: nil checker")
	}
	o, err := o.validate()
	if err != nil {
		return nil, err
	}
	// validate parsed the policy and mode: they compile.
	rt, err := fencecheck.CompileRoute(fencecheck.RouteSpec{Policy: string(o.Policy), Mode: string(o.Mode)})
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	return &Handler{check: c, o: o, route: rt, log: o.Logger, m: newMetrics(o.Registerer)}, nil
}

// Ready reports whether the webhook can serve: its certificate is loaded.
// (The backend's health is /readyz's business: a review with the backend
// down is still answered, fail-closed.)
func (h *Handler) Ready() bool {
	return h.o.CertReady == nil || h.o.CertReady()
}

// ServeHTTP reads an admission.k8s.io/v1 AdmissionReview and writes the
// answer. Requests that are not a usable review get a 4xx with a JSON error
// body; the API server treats that as a failed call (failurePolicy applies).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	op := operationUnknown
	// A panic outside Review (reading or encoding the review) goes on to
	// the listener's recovery (a 500; the API server applies failurePolicy).
	defer func() { h.m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds()) }()

	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reject(w, op, reasonBadMethod, http.StatusMethodNotAllowed, "admission reviews are POSTed")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.reject(w, op, reasonBadContentType, http.StatusUnsupportedMediaType,
			fmt.Sprintf("content type %q: want application/json", r.Header.Get("Content-Type")))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.reject(w, op, reasonTooLarge, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("review body over %d bytes", h.o.MaxBodyBytes))
			return
		}
		h.reject(w, op, reasonBadReview, http.StatusBadRequest, "reading the review body: "+err.Error())
		return
	}

	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		h.reject(w, op, reasonBadReview, http.StatusBadRequest, "the body is not an AdmissionReview: "+err.Error())
		return
	}
	gvk := admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
	if in.APIVersion != gvk.GroupVersion().String() || in.Kind != gvk.Kind {
		h.reject(w, op, reasonBadReview, http.StatusBadRequest,
			fmt.Sprintf("got apiVersion %q kind %q: want %s AdmissionReview (admissionReviewVersions: [v1])",
				in.APIVersion, in.Kind, gvk.GroupVersion()))
		return
	}
	if in.Request == nil || in.Request.UID == "" {
		h.reject(w, op, reasonBadReview, http.StatusBadRequest, "the AdmissionReview has no request or no request uid")
		return
	}
	op = operationLabel(in.Request.Operation)

	resp := h.tracedReview(r, in.Request)
	out := admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp}
	out.APIVersion, out.Kind = gvk.GroupVersion().String(), gvk.Kind
	// The API server matches the answer to its request by uid; never trust
	// Review to have set it.
	out.Response.UID = in.Request.UID
	buf, err := json.Marshal(out)
	if err != nil {
		h.reject(w, op, reasonBadReview, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}

// Review decides one admission request. It never returns nil; a panic while
// deciding becomes a 500 denial (fail closed, like the backend failing).
func (h *Handler) Review(ctx context.Context, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	if req == nil {
		h.count(operationUnknown, decisionError, reasonBadReview)
		return Denied("", http.StatusBadRequest, metav1.StatusReasonBadRequest, "fencegate: no admission request")
	}
	op := operationLabel(req.Operation)
	// This recovery stays although the listener recovers too: a panic while
	// deciding must still be a well-formed AdmissionReview denial carrying
	// the request's uid (a bare 500 would leave the outcome to the webhook's
	// failurePolicy, which may be Ignore: fail open), and Review is also
	// called directly, outside any listener.
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("admission: panic while deciding a review", "panic", p, "uid", logUID(req.UID))
			h.count(op, decisionError, reasonPanic)
			resp = Denied(req.UID, http.StatusInternalServerError, metav1.StatusReasonInternalError, "fencegate: internal error while checking the fence")
		}
	}()

	if h.exempt(req) {
		h.count(op, decisionExempt, reasonNone)
		return Allowed(req.UID)
	}
	if !h.governedResource(req) {
		h.count(op, decisionUngoverned, reasonOtherResource)
		return Allowed(req.UID)
	}
	var newer, older []byte
	switch req.Operation {
	case admissionv1.Create:
		newer = req.Object.Raw
	case admissionv1.Update:
		newer, older = req.Object.Raw, req.OldObject.Raw
	case admissionv1.Delete:
		older = req.OldObject.Raw
	default:
		h.count(op, decisionUngoverned, reasonOtherOperation)
		return Allowed(req.UID)
	}
	newAnn, err := annotationsOf(newer)
	if err == nil {
		var oldAnn map[string]string
		oldAnn, err = annotationsOf(older)
		if err == nil {
			return h.decide(ctx, req, op, newAnn, oldAnn)
		}
	}
	h.log.Warn("admission: undecodable object in review", "uid", logUID(req.UID), "err", err)
	h.count(op, decisionError, reasonBadObject)
	return Denied(req.UID, http.StatusBadRequest, "BadRequest", "fencegate: the object in the review is not a JSON object: "+err.Error())
}

// decide picks the key and fence per operation (see the package doc) and
// asks the checker.
func (h *Handler) decide(ctx context.Context, req *admissionv1.AdmissionRequest, op string, newAnn, oldAnn map[string]string) *admissionv1.AdmissionResponse {
	names := h.o.Annotations
	var key, fence string
	switch req.Operation {
	case admissionv1.Create:
		key, fence = newAnn[names.Key], newAnn[names.Fence]
	case admissionv1.Update:
		key, fence = oldAnn[names.Key], newAnn[names.Fence]
		if key == "" {
			key = newAnn[names.Key]
		}
	case admissionv1.Delete:
		key, fence = oldAnn[names.Key], oldAnn[names.Fence]
	}
	if key == "" && fence == "" {
		h.count(op, decisionUngoverned, reasonNotGoverned)
		return Allowed(req.UID)
	}

	dryRun := req.DryRun != nil && *req.DryRun
	r := h.route.WriteRequest(key, fence, fencecheck.Input{
		Method: string(req.Operation), Path: apiPath(req), Peer: req.UserInfo.Username, Source: Source,
	})
	r.Route, r.SkipAudit = routeOf(req), dryRun
	d, err := h.check.Check(ctx, r)
	if err != nil {
		// d is the fail-closed denial; say why in the log, not to the client.
		h.log.Warn("admission: could not decide; failing closed",
			"uid", logUID(req.UID), "decisionId", d.DecisionID, "keyHash", lockstore.HashKey(key), "err", err)
	}
	h.log.Debug("admission: decided",
		"uid", logUID(req.UID), "operation", req.Operation, "resource", lockstore.Clip(routeOf(req), lockstore.MaxAuditRoute),
		"decisionId", d.DecisionID, "allowed", d.Allowed, "wouldDeny", d.WouldDeny,
		"reason", d.Reason, "dryRun", dryRun, "keyHash", lockstore.HashKey(key))

	reason := string(d.Reason)
	if reason == "" {
		reason = reasonNone
	}
	var resp *admissionv1.AdmissionResponse
	switch {
	case !d.Allowed:
		h.count(op, decisionDeny, reason)
		resp = denial(req.UID, d, names)
	case d.WouldDeny:
		h.count(op, decisionWouldDeny, reason)
		resp = Allowed(req.UID)
		if d.Mode == fencecheck.ModeWarn {
			resp.Warnings = []string{"would be denied in enforce mode: " + describe(d, names)}
		}
	default:
		h.count(op, decisionAllow, reason)
		resp = Allowed(req.UID)
	}
	if d.DecisionID != "" {
		// Lands in the API server's audit log next to the request.
		resp.AuditAnnotations = map[string]string{"decision-id": d.DecisionID}
		if d.Reason != "" {
			resp.AuditAnnotations["reason"] = string(d.Reason)
		}
	}
	return resp
}

func (h *Handler) exempt(req *admissionv1.AdmissionRequest) bool {
	u := req.UserInfo.Username
	if u != "" && (u == h.o.ServiceAccount || slices.Contains(h.o.ExemptUsers, u)) {
		return true
	}
	for _, g := range req.UserInfo.Groups {
		if slices.Contains(h.o.ExemptGroups, g) {
			return true
		}
	}
	return false
}

func (h *Handler) governedResource(req *admissionv1.AdmissionRequest) bool {
	if len(h.o.Resources) == 0 {
		return true
	}
	for _, r := range h.o.Resources {
		if r.matches(req.Resource.Group, req.Resource.Resource, req.SubResource) {
			return true
		}
	}
	return false
}

func (h *Handler) count(op, decision, reason string) {
	h.m.reviews.WithLabelValues(op, decision, reason).Inc()
}

// reject answers a request that is not a usable review.
func (h *Handler) reject(w http.ResponseWriter, op, reason string, status int, msg string) {
	h.count(op, decisionError, reason)
	h.log.Warn("admission: unusable review request", "status", status, "reason", reason, "err", msg)
	code := "InvalidArgument"
	if status >= 500 {
		code = "Internal"
	}
	httpError(w, status, code, msg)
}

func httpError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": "admission: " + msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// annotationsOf decodes only metadata.annotations of an embedded object;
// no object at all is no annotations.
func annotationsOf(raw []byte) (map[string]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var obj struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decode object metadata: %w", err)
	}
	return obj.Metadata.Annotations, nil
}

// operationLabel bounds the operation label to the four the API knows.
func operationLabel(op admissionv1.Operation) string {
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
		return string(op)
	}
	return operationUnknown
}

// routeOf names the resource for audit, e.g. "configmaps" or
// "apps/deployments/status": bounded by what the cluster serves.
func routeOf(req *admissionv1.AdmissionRequest) string {
	s := req.Resource.Resource
	if req.Resource.Group != "" {
		s = req.Resource.Group + "/" + s
	}
	if req.SubResource != "" {
		s += "/" + req.SubResource
	}
	return s
}

// apiPath renders the object's REST path (no query), for the audit trail.
func apiPath(req *admissionv1.AdmissionRequest) string {
	p := "/api/" + req.Resource.Version
	if req.Resource.Group != "" {
		p = "/apis/" + req.Resource.Group + "/" + req.Resource.Version
	}
	if req.Namespace != "" {
		p = path.Join(p, "namespaces", req.Namespace)
	}
	p = path.Join(p, req.Resource.Resource, req.Name, req.SubResource)
	return p
}

// logUID is a review's UID as log lines carry it: the caller chose it, so it
// is cut to a bound (a real one is a 36-character UUID).
func logUID(uid types.UID) string { return lockstore.Clip(string(uid), 64) }
