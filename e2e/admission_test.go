package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/certwatch/certtest"
)

// TestAdmissionListenerInTheBinary: `fencegate serve` with a webhook
// certificate serves AdmissionReviews over HTTPS on its own listener, with
// the same decision as the edge. (e2e/kube drives the handler through a real
// kube-apiserver; this proves the binary's wiring of it.)
func TestAdmissionListenerInTheBinary(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t, "webhook-ca")
	cert, key := ca.Server(t, "fencegate-webhook", "127.0.0.1").Write(t, filepath.Join(dir, "tls"))
	g := StartGateway(t, "bolt://"+filepath.Join(dir, "fg.db"),
		"--admission-addr", "127.0.0.1:0", "--admission-tls-cert", cert, "--admission-tls-key", key)
	if g.Admission == "" {
		t.Fatal("the ready line names no admission listener")
	}
	if r := Do(t, g.URL(), Call{Method: "GET", Path: "/readyz"}); r.Status != http.StatusOK {
		t.Fatalf("/readyz = %d %s", r.Status, r.Body)
	}
	acq := Do(t, g.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"cm/settings"}`})
	fence, _ := acq.JSON["fence"].(string)
	if fence == "" {
		t.Fatalf("acquire: %d %s", acq.Status, acq.Body)
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	review := func(annotations map[string]string) map[string]any {
		t.Helper()
		obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "settings", "namespace": "default", "annotations": annotations}}
		body, _ := json.Marshal(map[string]any{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"request": map[string]any{
				"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "UPDATE",
				"kind":     map[string]any{"group": "", "version": "v1", "kind": "ConfigMap"},
				"resource": map[string]any{"group": "", "version": "v1", "resource": "configmaps"},
				"name":     "settings", "namespace": "default",
				"userInfo": map[string]any{"username": "system:serviceaccount:jobs:reconciler"},
				"object":   obj, "oldObject": obj,
			},
		})
		resp, err := hc.Post("https://"+g.Admission+"/admission/validate", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("webhook answered %d: %s", resp.StatusCode, raw)
		}
		var out struct {
			Response map[string]any `json:"response"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		if out.Response["uid"] != "705ab4f5-6393-11e8-b7cc-42010a800002" {
			t.Fatalf("uid not echoed: %s", raw)
		}
		return out.Response
	}

	if r := review(nil); r["allowed"] != true {
		t.Fatalf("ungoverned object denied: %v", r)
	}
	if r := review(map[string]string{"fencegate.io/key": "cm/settings", "fencegate.io/fence": fence}); r["allowed"] != true {
		t.Fatalf("current fence denied: %v", r)
	}
	stale := fmt.Sprintf("%015d", 0)
	r := review(map[string]string{"fencegate.io/key": "cm/settings", "fencegate.io/fence": stale})
	st, _ := r["status"].(map[string]any)
	if r["allowed"] != false || st["code"] != float64(409) {
		t.Fatalf("stale fence: %v", r)
	}
	if r := review(map[string]string{"fencegate.io/key": "cm/settings"}); r["allowed"] != false {
		t.Fatalf("missing fence allowed: %v", r)
	}
}
