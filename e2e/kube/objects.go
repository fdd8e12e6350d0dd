package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Resource is a kind's REST resource: the path segment and whether it
// lives in a namespace.
type Resource struct {
	Plural     string
	Namespaced bool
}

// Resources maps "apiVersion Kind" (e.g. "apps/v1 Deployment") to its REST
// resource.
type Resources map[string]Resource

// YAMLDocs splits a YAML stream into documents (as JSON-compatible maps),
// skipping empty ones.
func YAMLDocs(data []byte) ([]map[string]any, error) {
	var out []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// MetaString is a string field of doc's metadata ("" when absent).
func MetaString(doc map[string]any, field string) string {
	md, _ := doc["metadata"].(map[string]any)
	s, _ := md[field].(string)
	return s
}

// ObjectPath is the REST path of doc. A kind missing from resources is an
// error, so an object cannot go unvalidated.
func ObjectPath(resources Resources, doc map[string]any) (string, error) {
	apiVersion, _ := doc["apiVersion"].(string)
	kind, _ := doc["kind"].(string)
	name, ns := MetaString(doc, "name"), MetaString(doc, "namespace")
	r, ok := resources[apiVersion+" "+kind]
	if !ok || name == "" {
		return "", fmt.Errorf("no REST resource known for %s %s %q: add it to the resources (or install its CRD)", apiVersion, kind, name)
	}
	base := "/apis/" + apiVersion
	if !strings.Contains(apiVersion, "/") {
		base = "/api/" + apiVersion
	}
	if r.Namespaced {
		if ns == "" {
			return "", fmt.Errorf("%s %s has no namespace", kind, name)
		}
		base += "/namespaces/" + ns
	}
	return base + "/" + r.Plural + "/" + name, nil
}

// Apply sends every document of manifests as user by server-side apply
// with strict field validation (an unknown or duplicate field is an error,
// not a warning), through every admission plugin, as `kubectl apply
// --server-side` does; with dryRun nothing is stored (`--dry-run=server`).
// Manifests without a document are an error. It returns the API server's
// warnings.
func (a *APIServer) Apply(user string, resources Resources, manifests []byte, dryRun bool) (warnings []string, err error) {
	q := url.Values{"fieldManager": {"fencegate-test"}, "fieldValidation": {"Strict"}, "force": {"true"}}
	if dryRun {
		q.Set("dryRun", "All")
	}
	docs, err := YAMLDocs(manifests)
	if err != nil {
		return nil, err
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no documents")
	}
	for _, doc := range docs {
		path, err := ObjectPath(resources, doc)
		if err != nil {
			return warnings, err
		}
		body, err := json.Marshal(doc)
		if err != nil {
			return warnings, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, raw, hdr, err := a.Do(ctx, user, http.MethodPatch, path+"?"+q.Encode(), body, "application/apply-patch+yaml")
		cancel()
		if err != nil {
			return warnings, fmt.Errorf("%s: %w", path, err)
		}
		for _, w := range hdr.Values("Warning") {
			warnings = append(warnings, path+": "+w)
		}
		if code != http.StatusOK && code != http.StatusCreated {
			return warnings, fmt.Errorf("%s: %d %s", path, code, raw)
		}
	}
	return warnings, nil
}

// WaitEstablished waits, asking as user, until every CRD in names is
// Established (the API server serves its resource); the test fails after
// a minute.
func (a *APIServer) WaitEstablished(t testing.TB, user string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range names {
		for {
			code, raw, _, err := a.Do(context.Background(), user, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, nil, "")
			if err == nil && code == http.StatusOK {
				var crd struct {
					Status struct {
						Conditions []struct{ Type, Status string } `json:"conditions"`
					} `json:"status"`
				}
				if json.Unmarshal(raw, &crd) == nil && slices.ContainsFunc(crd.Status.Conditions, func(c struct{ Type, Status string }) bool {
					return c.Type == "Established" && c.Status == "True"
				}) {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established within a minute (last: %d %s %v)", name, code, raw, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
