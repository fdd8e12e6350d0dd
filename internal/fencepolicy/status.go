package fencepolicy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"time"
)

// syncChildren creates, updates and deletes the emitted objects so that
// exactly the desired ones exist, and reports for each desired one whether
// its controller accepted it (and why not).
func (c *Controller) syncChildren(ctx context.Context, results []*policyResult) (map[string]bool, error) {
	k := c.opts.Kube
	desired := map[string]desiredChild{}
	for _, res := range results {
		for _, ch := range res.children {
			desired[ch.key()] = ch
		}
	}
	observed := map[string]bool{}
	why := map[string]string{}
	sel := LabelManagedBy + "=" + ManagedBy
	for _, r := range []resource{rSecurityPolicy, rExtensionPolicy, rAuthorizationPolicy} {
		raws, served, err := k.list(ctx, r, sel)
		if err != nil {
			return nil, err
		}
		existing := map[string]child{}
		for _, raw := range raws {
			var ch child
			if err := json.Unmarshal(raw, &ch); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(raw, &ch.raw); err != nil {
				return nil, err
			}
			existing[r.plural+"/"+ch.Metadata.Namespace+"/"+ch.Metadata.Name] = ch
		}
		for key, ch := range existing {
			if _, ok := desired[key]; ok {
				continue
			}
			// A policy deleted (its owner reference also lets the garbage
			// collector do this), retargeted, or no longer accepted.
			err := k.call(ctx, "delete", r, ch.Metadata.Namespace, ch.Metadata.Name, "", "", nil, nil)
			if err != nil && !IsStatus(err, http.StatusNotFound) {
				return nil, err
			}
			c.log.Info("fencepolicy: deleted a stale data-plane object", "object", key)
		}
		keys := make([]string, 0, len(desired))
		for key := range desired {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			d := desired[key]
			if d.res != r {
				continue
			}
			if !served {
				why[key] = "the API server does not serve " + r.plural + "." + r.group + " (its CRD is not installed)"
				continue
			}
			specHash := hashOf(d.obj["spec"])
			md := d.obj["metadata"].(map[string]any)
			md["annotations"] = map[string]any{specHashAnnotation: specHash}
			ex, ok := existing[key]
			if !ok {
				if err := k.call(ctx, "create", r, md["namespace"].(string), "", "", "fieldValidation=Strict", d.obj, nil); err != nil {
					return nil, err
				}
				why[key] = "just created; its controller has written no status yet"
				continue
			}
			exMD := ex.raw["metadata"].(map[string]any)
			exAnn, _ := exMD["annotations"].(map[string]any)
			if exAnn[specHashAnnotation] != specHash || !reflect.DeepEqual(toJSON(exMD["ownerReferences"]), toJSON(md["ownerReferences"])) {
				obj := ex.raw
				obj["spec"] = d.obj["spec"]
				exMD["labels"] = md["labels"]
				exMD["ownerReferences"] = md["ownerReferences"]
				if exAnn == nil {
					exMD["annotations"] = map[string]any{}
				}
				exMD["annotations"].(map[string]any)[specHashAnnotation] = specHash
				delete(obj, "status") // the main resource ignores it
				if err := k.call(ctx, "update", r, ex.Metadata.Namespace, ex.Metadata.Name, "", "fieldValidation=Strict", obj, nil); err != nil {
					return nil, err
				}
				why[key] = "just updated; its controller has not accepted this generation yet"
				continue
			}
			ok, w := accepted(ex)
			observed[key] = ok
			why[key] = w
		}
	}
	c.why = why
	return observed, nil
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func hashOf(v any) string {
	s := sha256.Sum256([]byte(toJSON(v)))
	return hex.EncodeToString(s[:8])
}

// setCondition puts cond into conds, keeping its lastTransitionTime when
// the status did not change.
func setCondition(conds []Condition, cond Condition, now time.Time) []Condition {
	for i, old := range conds {
		if old.Type == cond.Type {
			cond.LastTransitionTime = old.LastTransitionTime
			if old.Status != cond.Status || cond.LastTransitionTime == "" {
				cond.LastTransitionTime = now.UTC().Format(time.RFC3339)
			}
			conds[i] = cond
			return conds
		}
	}
	cond.LastTransitionTime = now.UTC().Format(time.RFC3339)
	return append(conds, cond)
}

// writeStatus updates the policy's status when it changed (an update with
// the resourceVersion read: a concurrent writer's 409 is retried at the
// next pass).
func (c *Controller) writeStatus(ctx context.Context, res *policyResult, hash string) error {
	p := res.p
	st := PolicyStatus{ObservedGeneration: p.Metadata.Generation, Conditions: append([]Condition(nil), p.Status.Conditions...)}
	now := time.Now()
	st.Conditions = setCondition(st.Conditions, res.accepted, now)
	st.Conditions = setCondition(st.Conditions, res.enforced, now)
	for _, e := range res.entries {
		st.Entries = append(st.Entries, e.Name)
	}
	if res.accepted.Status == "True" {
		st.TableHash = hash
	}
	if reflect.DeepEqual(st, p.Status) {
		return nil
	}
	obj := map[string]any{
		"apiVersion": "fencegate.io/v1alpha1", "kind": "FencePolicy",
		"metadata": map[string]any{"name": p.Metadata.Name, "namespace": p.Metadata.Namespace, "resourceVersion": p.Metadata.ResourceVersion},
		"spec":     p.Spec,
		"status":   st,
	}
	return c.opts.Kube.call(ctx, "update", rFencePolicy, p.Metadata.Namespace, p.Metadata.Name, "status", "", obj, nil)
}

// writeRouteStatus keeps one status.parents entry of ours (controllerName
// StatusControllerName) per parentRef of every route an accepted policy
// targets, with the condition Fenced (True only when the policy is
// Enforced), and removes ours from every other route. Other controllers'
// entries are kept as they are.
func (c *Controller) writeRouteStatus(ctx context.Context, routesByName map[string]*httpRoute, results []*policyResult) error {
	type fence struct {
		policy string
		cond   Condition
	}
	fenced := map[string]fence{} // route → its (oldest) policy's state
	for _, res := range results {
		if res.accepted.Status != "True" {
			continue
		}
		for _, t := range res.targets {
			key := nsName(t.route.Metadata.Namespace, t.route.Metadata.Name)
			if _, ok := fenced[key]; ok {
				continue
			}
			cd := Condition{Type: CondRouteFenced, Status: res.enforced.Status, Reason: res.enforced.Reason,
				Message: fmt.Sprintf("FencePolicy %s: %s", res.p.Metadata.Name, res.enforced.Message), ObservedGeneration: t.route.Metadata.Generation}
			if len(cd.Message) > 1024 {
				cd.Message = cd.Message[:1024]
			}
			fenced[key] = fence{res.p.Metadata.Name, cd}
		}
	}
	var firstErr error
	for key, hr := range routesByName {
		var route map[string]any
		if err := json.Unmarshal(hr.raw, &route); err != nil {
			return err
		}
		status, _ := route["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
		}
		parents, _ := status["parents"].([]any)
		var kept []any
		var ours []map[string]any
		for _, pe := range parents {
			m, _ := pe.(map[string]any)
			if m["controllerName"] == StatusControllerName {
				ours = append(ours, m)
				continue
			}
			kept = append(kept, pe)
		}
		f, want := fenced[key]
		if !want && len(ours) == 0 {
			continue
		}
		var next []map[string]any
		if want {
			for _, pr := range hr.Spec.ParentRefs {
				var prev []any
				for _, o := range ours {
					var opr parentRef
					_ = json.Unmarshal([]byte(toJSON(o["parentRef"])), &opr)
					if toJSON(opr) == toJSON(pr) {
						prev, _ = o["conditions"].([]any)
					}
				}
				var conds []Condition
				_ = json.Unmarshal([]byte(toJSON(prev)), &conds)
				conds = setCondition(conds, f.cond, time.Now())
				next = append(next, map[string]any{"parentRef": pr, "controllerName": StatusControllerName, "conditions": conds})
			}
		}
		if toJSON(next) == toJSON(normalize(ours)) {
			continue
		}
		for _, n := range next {
			kept = append(kept, n)
		}
		status["parents"] = kept
		if kept == nil {
			status["parents"] = []any{}
		}
		route["status"] = status
		ns, name := hr.Metadata.Namespace, hr.Metadata.Name
		if err := c.opts.Kube.call(ctx, "update", rHTTPRoute, ns, name, "status", "", route, nil); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("route %s status: %w", url.PathEscape(key), err)
		}
	}
	return firstErr
}

// normalize round-trips ours through the same types next is built from,
// so equal content compares equal.
func normalize(ours []map[string]any) []map[string]any {
	var out []map[string]any
	for _, o := range ours {
		var pr parentRef
		_ = json.Unmarshal([]byte(toJSON(o["parentRef"])), &pr)
		var conds []Condition
		_ = json.Unmarshal([]byte(toJSON(o["conditions"])), &conds)
		out = append(out, map[string]any{"parentRef": pr, "controllerName": StatusControllerName, "conditions": conds})
	}
	return out
}
