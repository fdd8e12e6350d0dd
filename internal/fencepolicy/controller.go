package fencepolicy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/routes"
)

// StatusControllerName is the controllerName of the entries this
// controller writes into HTTPRoute status.parents.
const StatusControllerName = "fencegate.io/fencepolicy-controller"

// Condition types and reasons of a FencePolicy's status.
const (
	CondAccepted = "Accepted"
	CondEnforced = "Enforced"
	// CondRouteFenced is the condition in the route's status.parents entry.
	CondRouteFenced = "Fenced"

	ReasonAccepted       = "Accepted"
	ReasonTargetNotFound = "TargetNotFound"
	ReasonInvalid        = "Invalid"
	ReasonConflicted     = "Conflicted"
	// ReasonTargetNotAccepted: no parent Gateway's own controller accepted
	// the target route at its current generation, so the route takes no
	// traffic and its hostnames and paths are only a claim.
	ReasonTargetNotAccepted = "TargetNotAccepted"

	ReasonEnforced           = "Enforced"
	ReasonNotAccepted        = "NotAccepted"
	ReasonPending            = "Pending"
	ReasonGatewaysNotServing = "GatewaysNotServing"
	ReasonParentNotFound     = "ParentNotFound"
	ReasonUnsupported        = "Unsupported"
)

// RoutesFileKey is the published ConfigMap's key: the file the gateways
// include (config routesFile); HashAnnotation carries its SHA-256.
const (
	RoutesFileKey  = "routes.yaml"
	HashAnnotation = "fencegate.io/routes-sha256"
	// specHashAnnotation on an emitted object: the hash of the spec the
	// controller last wrote, so defaults the API server fills in do not
	// look like drift.
	specHashAnnotation = "fencegate.io/spec-sha256"
)

// Options configure the controller.
type Options struct {
	Kube *Kube
	// ConfigMap is the name of the published ConfigMap in Kube.Namespace
	// (default fencegate-policy-routes).
	ConfigMap string
	// Service, ServiceNamespace, ServicePort: fencegate's authz gRPC
	// listener, what Envoy Gateway's policies call.
	Service          string
	ServiceNamespace string
	ServicePort      int
	// IstioProvider is the meshConfig extensionProviders name of
	// fencegate (default fencegate).
	IstioProvider string
	// Gateways are the gateways' metrics URLs (http://host:port/metrics);
	// each host is resolved to all its addresses (a headless Service's
	// name: one per ready replica), and every one must report the
	// published hash before a policy is Enforced.
	Gateways []string
	// Resync is the period of the full pass (default 1s).
	Resync time.Duration
	// MaxWriteCap and MaxWaitCap are the gateways' check.maxWriteCap and
	// check.maxWaitCap: a policy above them is Invalid (the gateways
	// would refuse the whole published file).
	MaxWriteCap, MaxWaitCap time.Duration
	// ProofSigning says the gateways have a proof key (proof.keys or
	// proof.verifyKeys; the chart sets --proof-signing then). Without it a
	// `proof: signed` policy is Invalid: a gateway refuses to start with
	// such an entry and no key (config.ProofKeyProblems), so publishing it
	// would crash-loop every gateway at its next restart.
	ProofSigning bool
	Logger       *slog.Logger

	// Broken variants, only so the tests can show they catch each; never
	// set in production.
	brokenEarlyEnforced bool // Enforced without observing children or gateways
	brokenFromPolicy    bool // entries from the policy alone (every path, any host), not the route
	brokenAnyParent     bool // entries from a route no parent Gateway accepted
}

// Controller reconciles FencePolicies. Several replicas may run: every
// write is an update with the resourceVersion read in the same pass (or a
// create), so a replica working from an older read gets 409 and retries
// at its next pass; replicas reading the same objects compute the same
// objects (deterministic order, no timestamps in specs).
type Controller struct {
	opts Options
	log  *slog.Logger
	hc   *http.Client
	why  map[string]string // per emitted object, why it is not (yet) accepted: the last pass's
}

// New checks o and returns a controller.
func New(o Options) (*Controller, error) {
	if o.Kube == nil {
		return nil, errors.New("fencepolicy: no API server")
	}
	if o.ConfigMap == "" {
		o.ConfigMap = "fencegate-policy-routes"
	}
	if o.IstioProvider == "" {
		o.IstioProvider = "fencegate"
	}
	if o.Service == "" || o.ServicePort == 0 {
		return nil, errors.New("fencepolicy: fencegate's authz Service and port are required (--service, --service-port)")
	}
	if o.ServiceNamespace == "" {
		o.ServiceNamespace = o.Kube.Namespace
	}
	if o.Resync <= 0 {
		o.Resync = time.Second
	}
	if o.MaxWriteCap == 0 {
		o.MaxWriteCap = fencecheck.DefaultMaxWriteCap
	}
	if o.MaxWaitCap == 0 {
		o.MaxWaitCap = fencecheck.DefaultMaxWaitCap
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.Gateways) == 0 {
		return nil, errors.New("fencepolicy: no gateway to observe (--gateway): Enforced could never be true")
	}
	for _, g := range o.Gateways {
		if u, err := url.Parse(g); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("fencepolicy: gateway %q is not an http(s) URL of a gateway's /metrics", g)
		}
	}
	return &Controller{opts: o, log: o.Logger, hc: &http.Client{Timeout: 2 * time.Second}}, nil
}

// Run reconciles every Resync until ctx ends. A failed pass is logged and
// retried at the next: level-triggered, nothing is remembered between
// passes but what the API server holds.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.Resync)
	defer t.Stop()
	for {
		if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("fencepolicy: pass failed; retried at the next", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// policyResult is what one pass decided for one policy.
type policyResult struct {
	p        *FencePolicy
	accepted Condition
	targets  []target
	entries  []config.Route
	enforced Condition
	children []desiredChild
	// problems that keep it from being enforced (besides the children's
	// and the gateways' acceptance)
	notEnforced []string
	reason      string
}

func nsName(ns, name string) string { return ns + "/" + name }

// Pass is one full reconciliation.
func (c *Controller) Pass(ctx context.Context) error {
	k := c.opts.Kube
	var policies []*FencePolicy
	raws, _, err := k.list(ctx, rFencePolicy, "")
	if err != nil {
		return err
	}
	for _, r := range raws {
		var p FencePolicy
		if err := json.Unmarshal(r, &p); err != nil {
			return err
		}
		policies = append(policies, &p)
	}
	// Older first: the older policy wins a rule (GEP-713's rule), names
	// break ties.
	sort.SliceStable(policies, func(i, j int) bool {
		a, b := policies[i].Metadata, policies[j].Metadata
		if !a.CreationTimestamp.Equal(b.CreationTimestamp) {
			return a.CreationTimestamp.Before(b.CreationTimestamp)
		}
		return nsName(a.Namespace, a.Name) < nsName(b.Namespace, b.Name)
	})
	routesByName := map[string]*httpRoute{}
	raws, _, err = k.list(ctx, rHTTPRoute, "")
	if err != nil {
		return err
	}
	for _, r := range raws {
		hr := &httpRoute{raw: r}
		if err := json.Unmarshal(r, hr); err != nil {
			return err
		}
		routesByName[nsName(hr.Metadata.Namespace, hr.Metadata.Name)] = hr
	}
	gateways := map[string]*gateway{}
	raws, _, err = k.list(ctx, rGateway, "")
	if err != nil {
		return err
	}
	for _, r := range raws {
		var g gateway
		if err := json.Unmarshal(r, &g); err != nil {
			return err
		}
		gateways[nsName(g.Metadata.Namespace, g.Metadata.Name)] = &g
	}
	classes := map[string]string{}
	raws, _, err = k.list(ctx, rGatewayClass, "")
	if err != nil {
		return err
	}
	for _, r := range raws {
		var gc gatewayClass
		if err := json.Unmarshal(r, &gc); err != nil {
			return err
		}
		classes[gc.Metadata.Name] = gc.Spec.ControllerName
	}

	// Targets, entries, conflicts: older policies first.
	claims := map[string]string{} // ns/route/rule → policy
	var published []config.Route
	results := make([]*policyResult, 0, len(policies))
	for _, p := range policies {
		res := &policyResult{p: p}
		results = append(results, res)
		cond := func(reason, msg string) {
			st := "True"
			if reason != ReasonAccepted {
				st = "False"
			}
			res.accepted = Condition{Type: CondAccepted, Status: st, Reason: reason, Message: msg, ObservedGeneration: p.Metadata.Generation}
		}
		ns := p.Metadata.Namespace
		var missing, unaccepted []string
		for _, ref := range p.Spec.TargetRefs {
			hr := routesByName[nsName(ns, ref.Name)]
			if hr == nil {
				missing = append(missing, fmt.Sprintf("HTTPRoute %s/%s does not exist", ns, ref.Name))
				continue
			}
			t := target{ref: ref, route: hr}
			for i, rule := range hr.Spec.Rules {
				if ref.SectionName == "" || rule.Name == ref.SectionName {
					t.rules = append(t.rules, i)
				}
			}
			if len(t.rules) == 0 {
				missing = append(missing, fmt.Sprintf("HTTPRoute %s/%s has no rule named %q", ns, ref.Name, ref.SectionName))
				continue
			}
			var why []string
			t.parents, why, t.stale = acceptedParents(hr, gateways, classes)
			if c.opts.brokenAnyParent {
				t.parents, why, t.stale = hr.Spec.ParentRefs, nil, nil
			}
			if len(t.parents) > 0 && !c.opts.brokenAnyParent {
				var admitted bool
				t.hosts, admitted = effectiveHosts(hr, t.parents, gateways)
				t.scoped = true
				if !admitted {
					t.parents = nil
					why = append(why, fmt.Sprintf("no hostname of it (%s) is admitted by its Gateways' listeners", strings.Join(hr.Spec.Hostnames, ", ")))
				}
			}
			if len(t.parents) == 0 {
				if len(why) == 0 {
					why = []string{"it has no parentRefs"}
				}
				unaccepted = append(unaccepted, fmt.Sprintf("HTTPRoute %s/%s is not accepted by a parent Gateway: %s", ns, ref.Name, strings.Join(why, "; ")))
				continue
			}
			res.targets = append(res.targets, t)
		}
		if len(missing) > 0 {
			cond(ReasonTargetNotFound, strings.Join(missing, "; "))
			continue
		}
		if len(unaccepted) > 0 {
			cond(ReasonTargetNotAccepted, strings.Join(unaccepted, "; "))
			continue
		}
		var conflicts []string
		for _, t := range res.targets {
			for _, ri := range t.rules {
				if owner, ok := claims[fmt.Sprintf("%s/%s/%d", ns, t.route.Metadata.Name, ri)]; ok {
					conflicts = append(conflicts, fmt.Sprintf("rule %d of HTTPRoute %s is fenced by the older FencePolicy %s", ri, t.route.Metadata.Name, owner))
				}
			}
		}
		if len(conflicts) > 0 {
			cond(ReasonConflicted, strings.Join(conflicts, "; "))
			continue
		}
		entries, err := c.derive(p, res.targets)
		if err != nil {
			cond(ReasonInvalid, err.Error())
			continue
		}
		if _, err := routes.Compile(append(slices.Clone(published), entries...), routes.Options{}); err != nil {
			cond(ReasonConflicted, "its entries cannot be told apart from an older policy's: "+err.Error())
			continue
		}
		for _, t := range res.targets {
			for _, ri := range t.rules {
				claims[fmt.Sprintf("%s/%s/%d", ns, t.route.Metadata.Name, ri)] = nsName(ns, p.Metadata.Name)
			}
		}
		res.entries = entries
		published = append(published, entries...)
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.Name
		}
		cond(ReasonAccepted, fmt.Sprintf("%d route-table entries: %s", len(entries), strings.Join(names, ", ")))
	}

	hash, err := c.publish(ctx, published)
	if err != nil {
		return err
	}
	serving := c.observeGateways(ctx, hash)

	// Data-plane objects for the implementation of each parent Gateway.
	for _, res := range results {
		if res.accepted.Status != "True" {
			continue
		}
		p := res.p
		istioEntries := map[string][]config.Route{} // gateway name → entries
		for _, t := range res.targets {
			prefix := entryPrefix(p.Metadata.Namespace, p.Metadata.Name, t.route.Metadata.Name)
			var targetEntries []config.Route
			for _, e := range res.entries {
				if strings.HasPrefix(e.Name, prefix) {
					targetEntries = append(targetEntries, e)
				}
			}
			if len(targetEntries) == 0 {
				continue // the broken variant's single entry aside, every target has one
			}
			entry := targetEntries[0].Name
			if len(t.stale) > 0 {
				res.notEnforced = append(res.notEnforced, t.stale...)
				res.reason = cmpReason(res.reason, ReasonPending)
			}
			envoyDone := false
			for _, pr := range t.parents {
				if (pr.Group != nil && *pr.Group != "gateway.networking.k8s.io") || (pr.Kind != nil && *pr.Kind != "Gateway") {
					res.notEnforced = append(res.notEnforced, fmt.Sprintf("parent %s of HTTPRoute %s is not a Gateway", pr.Name, t.route.Metadata.Name))
					res.reason = cmpReason(res.reason, ReasonUnsupported)
					continue
				}
				gns := t.route.Metadata.Namespace
				if pr.Namespace != nil && *pr.Namespace != "" {
					gns = *pr.Namespace
				}
				gw := gateways[nsName(gns, pr.Name)]
				if gw == nil {
					res.notEnforced = append(res.notEnforced, fmt.Sprintf("Gateway %s/%s (parent of HTTPRoute %s) does not exist", gns, pr.Name, t.route.Metadata.Name))
					res.reason = cmpReason(res.reason, ReasonParentNotFound)
					continue
				}
				switch impl := classes[gw.Spec.GatewayClassName]; impl {
				case ControllerEnvoyGateway:
					if !envoyDone {
						res.children = append(res.children, c.envoyGatewayChild(p, t, entry))
						envoyDone = true
					}
				case ControllerIstio:
					if p.Spec.Barrier {
						res.notEnforced = append(res.notEnforced, fmt.Sprintf("Gateway %s/%s is Istio's: a CUSTOM AuthorizationPolicy is ext_authz, which cannot run the write barrier", gns, pr.Name))
						res.reason = cmpReason(res.reason, ReasonUnsupported)
						continue
					}
					if gns != p.Metadata.Namespace {
						res.notEnforced = append(res.notEnforced, fmt.Sprintf("Gateway %s/%s is in another namespace: an AuthorizationPolicy attached to it cannot be owned by this policy", gns, pr.Name))
						res.reason = cmpReason(res.reason, ReasonUnsupported)
						continue
					}
					istioEntries[pr.Name] = append(istioEntries[pr.Name], targetEntries...)
				case "":
					res.notEnforced = append(res.notEnforced, fmt.Sprintf("GatewayClass %q of Gateway %s/%s does not exist", gw.Spec.GatewayClassName, gns, pr.Name))
					res.reason = cmpReason(res.reason, ReasonParentNotFound)
				default:
					res.notEnforced = append(res.notEnforced, fmt.Sprintf("Gateway %s/%s is served by %s, which fencegate's controller does not configure (Envoy Gateway and Istio only)", gns, pr.Name, impl))
					res.reason = cmpReason(res.reason, ReasonUnsupported)
				}
			}
		}
		gws := make([]string, 0, len(istioEntries))
		for g := range istioEntries {
			gws = append(gws, g)
		}
		sort.Strings(gws)
		for _, g := range gws {
			ch, err := c.istioChild(p, g, istioEntries[g])
			if err != nil {
				res.notEnforced = append(res.notEnforced, err.Error())
				res.reason = cmpReason(res.reason, ReasonUnsupported)
				continue
			}
			res.children = append(res.children, ch)
		}
	}
	observed, err := c.syncChildren(ctx, results)
	if err != nil {
		return err
	}

	// Enforced: observed, never assumed.
	for _, res := range results {
		p := res.p
		en := Condition{Type: CondEnforced, Status: "False", ObservedGeneration: p.Metadata.Generation}
		var why []string
		reason := res.reason
		switch {
		case res.accepted.Status != "True":
			reason, why = ReasonNotAccepted, []string{"the policy is not accepted"}
		case c.opts.brokenEarlyEnforced:
		default:
			why = append(why, res.notEnforced...)
			for _, ch := range res.children {
				if !observed[ch.key()] {
					why = append(why, fmt.Sprintf("%s %s: %s", ch.kind, ch.key(), c.why[ch.key()]))
					reason = cmpReason(reason, ReasonPending)
				}
			}
			if len(res.children) == 0 && len(res.notEnforced) == 0 {
				why = append(why, "no parent Gateway to configure")
				reason = cmpReason(reason, ReasonParentNotFound)
			}
			if serving != "" {
				why = append(why, serving)
				reason = cmpReason(reason, ReasonGatewaysNotServing)
			}
		}
		if len(why) == 0 {
			en.Status, en.Reason = "True", ReasonEnforced
			en.Message = fmt.Sprintf("%d entries served by every gateway replica (table %s); %d data-plane objects accepted", len(res.entries), hash, len(res.children))
		} else {
			en.Reason, en.Message = reason, strings.Join(why, "; ")
		}
		res.enforced = en
		if err := c.writeStatus(ctx, res, hash); err != nil {
			c.log.Warn("fencepolicy: status not written; retried at the next pass", "policy", nsName(p.Metadata.Namespace, p.Metadata.Name), "err", err)
		}
	}
	return c.writeRouteStatus(ctx, routesByName, results)
}

// cmpReason keeps the first reason found.
func cmpReason(cur, next string) string {
	if cur != "" {
		return cur
	}
	return next
}

// derive is deriveEntries (or its broken variant) plus the gateways' caps.
func (c *Controller) derive(p *FencePolicy, targets []target) ([]config.Route, error) {
	if c.opts.brokenFromPolicy {
		opts, err := p.Spec.options()
		if err != nil {
			return nil, err
		}
		opts.Name = EntryName(p.Metadata.Namespace, p.Metadata.Name, targets[0].route.Metadata.Name, 0, 0)
		return []config.Route{opts}, nil
	}
	entries, err := deriveEntries(p.Metadata.Namespace, p.Metadata.Name, p.Spec, targets)
	if err != nil {
		return nil, err
	}
	if !c.opts.ProofSigning {
		if p := (&config.Config{Routes: entries[:min(1, len(entries))]}).ProofKeyProblems(); len(p) > 0 {
			return nil, errors.New("proof: signed, but the gateways have no proof key (the controller runs without --proof-signing, which the chart sets when proof.keys or proof.verifyKeys is non-empty): a gateway with this entry and no key refuses to start, and without the entry nothing would verify the proof")
		}
	}
	for _, e := range entries[:min(1, len(entries))] {
		if e.MaxWrite.Std() > c.opts.MaxWriteCap {
			return nil, fmt.Errorf("maxWrite %s is above the gateways' check.maxWriteCap %s", e.MaxWrite.Std(), c.opts.MaxWriteCap)
		}
		if e.EffectiveMaxWait() > c.opts.MaxWaitCap {
			return nil, fmt.Errorf("maxWait %s is above the gateways' check.maxWaitCap %s", e.EffectiveMaxWait(), c.opts.MaxWaitCap)
		}
	}
	return entries, nil
}

// RoutesFile renders entries as the file the gateways include: a YAML
// document with one key, routes:.
func RoutesFile(entries []config.Route) ([]byte, error) {
	type file struct {
		Routes []config.Route `yaml:"routes"`
	}
	if entries == nil {
		entries = []config.Route{}
	}
	return yaml.Marshal(file{Routes: entries})
}

// FileHash is the hash a gateway reports for an included routes file.
func FileHash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// publish writes the entries into the ConfigMap (create, or update with
// the resourceVersion read) and returns the content's hash.
func (c *Controller) publish(ctx context.Context, entries []config.Route) (string, error) {
	k := c.opts.Kube
	b, err := RoutesFile(entries)
	if err != nil {
		return "", err
	}
	hash := FileHash(b)
	var cm map[string]any
	err = k.call(ctx, "get", rConfigMap, k.Namespace, c.opts.ConfigMap, "", "", nil, &cm)
	switch {
	case IsStatus(err, http.StatusNotFound):
		cm = map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
			"name": c.opts.ConfigMap, "namespace": k.Namespace,
			"labels":      map[string]any{LabelManagedBy: ManagedBy},
			"annotations": map[string]any{HashAnnotation: hash},
		}, "data": map[string]any{RoutesFileKey: string(b)}}
		return hash, k.call(ctx, "create", rConfigMap, k.Namespace, "", "", "", cm, nil)
	case err != nil:
		return "", err
	}
	data, _ := cm["data"].(map[string]any)
	if data != nil && data[RoutesFileKey] == string(b) {
		return hash, nil
	}
	md, _ := cm["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
	}
	ann[HashAnnotation] = hash
	md["annotations"] = ann
	cm["data"] = map[string]any{RoutesFileKey: string(b)}
	c.log.Info("fencepolicy: publishing the route-table entries", "entries", len(entries), "sha256", hash)
	return hash, k.call(ctx, "update", rConfigMap, k.Namespace, c.opts.ConfigMap, "", "", cm, nil)
}

// GatewayHashMetric is the gateway's metric naming the routes file it
// serves (label sha256).
const GatewayHashMetric = "fencegate_routes_file_info"

// observeGateways asks every gateway replica which routes file it serves;
// "" when all serve hash, else why not.
func (c *Controller) observeGateways(ctx context.Context, hash string) string {
	var bad []string
	replicas := 0
	for _, g := range c.opts.Gateways {
		u, _ := url.Parse(g)
		host, port := u.Hostname(), u.Port()
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", host, err))
			continue
		}
		sort.Strings(addrs)
		for _, a := range addrs {
			replicas++
			v := *u
			v.Host = a
			if port != "" {
				v.Host = net.JoinHostPort(a, port)
			}
			got, err := c.gatewayHash(ctx, v.String())
			if err != nil {
				bad = append(bad, fmt.Sprintf("replica %s: %v", v.Host, err))
				continue
			}
			if got != hash {
				bad = append(bad, fmt.Sprintf("replica %s serves routes file %.12s, not the published %.12s", v.Host, got, hash))
			}
		}
	}
	if replicas == 0 && len(bad) == 0 {
		bad = append(bad, "no gateway replica found")
	}
	return strings.Join(bad, "; ")
}

func (c *Controller) gatewayHash(ctx context.Context, target string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("metrics answered %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := GatewayHashMetric + `{sha256="`
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			h, _, _ := strings.Cut(rest, `"`)
			return h, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no %s metric: the gateway has no routesFile", GatewayHashMetric)
}
