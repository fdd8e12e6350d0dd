package admission_test

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/admission"
)

// An object stamped by Annotate with the current fence is admitted; the
// same object stamped with the stale one is not.
func TestAnnotatedObjectRoundTrip(t *testing.T) {
	e := newEnv(t, admission.Options{}, nil)
	for _, tc := range []struct {
		fence   string
		allowed bool
	}{{currentFence, true}, {staleFence, false}} {
		cm := &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Annotations: map[string]string{"keep": "me"}},
		}
		if err := admission.Annotate(cm, testKey, tc.fence, admission.Annotations{}); err != nil {
			t.Fatal(err)
		}
		if cm.Annotations["keep"] != "me" {
			t.Fatal("Annotate dropped an existing annotation")
		}
		raw, err := json.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID:       types.UID("annotate-" + tc.fence),
				Operation: admissionv1.Create,
				Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
				Name:      "orders", Namespace: "shop",
				Object: runtime.RawExtension{Raw: raw},
			},
		}
		body, _ := json.Marshal(review)
		resp := decodeReview(t, post(e.h, body, "application/json"), string(review.Request.UID))
		if resp.Allowed != tc.allowed {
			t.Errorf("fence %s: allowed = %v, want %v", tc.fence, resp.Allowed, tc.allowed)
		}
	}
}

func TestAnnotateUnstructured(t *testing.T) {
	names := admission.Annotations{Key: "example.com/lock", Fence: "example.com/token"}
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}
	if err := admission.AnnotateUnstructured(obj, testKey, currentFence, names); err != nil {
		t.Fatal(err)
	}
	ann := obj["metadata"].(map[string]any)["annotations"].(map[string]any)
	if ann["example.com/lock"] != testKey || ann["example.com/token"] != currentFence {
		t.Fatalf("annotations %v", ann)
	}

	bad := map[string]any{"metadata": map[string]any{"annotations": "nope"}}
	if err := admission.AnnotateUnstructured(bad, testKey, currentFence, names); err == nil {
		t.Fatal("annotations of the wrong type accepted")
	}
	if err := admission.AnnotateUnstructured(nil, testKey, currentFence, names); err == nil {
		t.Fatal("nil object accepted")
	}
}

func TestStampValidation(t *testing.T) {
	cases := []struct{ key, fence string }{
		{"", currentFence},
		{strings.Repeat("k", 513), currentFence},
		{testKey, ""},
		{testKey, "42"},
		{testKey, "00000000000000x"},
	}
	for _, tc := range cases {
		if err := admission.Annotate(&corev1.ConfigMap{}, tc.key, tc.fence, admission.Annotations{}); err == nil {
			t.Errorf("Annotate(%q, %q) accepted", tc.key, tc.fence)
		}
		if _, err := admission.MergePatch(tc.key, tc.fence, admission.Annotations{}); err == nil {
			t.Errorf("MergePatch(%q, %q) accepted", tc.key, tc.fence)
		}
	}
}

func TestMergePatch(t *testing.T) {
	p, err := admission.MergePatch(testKey, currentFence, admission.Annotations{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"fencegate.io/fence":"000000000000002","fencegate.io/key":"orders/42"}}}`
	if string(p) != want {
		t.Fatalf("patch %s, want %s", p, want)
	}
}

func TestParseResource(t *testing.T) {
	cases := []struct {
		in   string
		want admission.Resource
	}{
		{"configmaps", admission.Resource{Resource: "configmaps"}},
		{"deployments.apps", admission.Resource{Group: "apps", Resource: "deployments"}},
		{"deployments.apps/status", admission.Resource{Group: "apps", Resource: "deployments/status"}},
		{"certificates.cert-manager.io", admission.Resource{Group: "cert-manager.io", Resource: "certificates"}},
		{"*", admission.Resource{Group: "*", Resource: "*"}},
		{"*/*", admission.Resource{Group: "*", Resource: "*/*"}},
		{"ConfigMaps", admission.Resource{Resource: "configmaps"}},
	}
	for _, tc := range cases {
		got, err := admission.ParseResource(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseResource(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if back, err := admission.ParseResource(got.String()); err != nil || back != got {
			t.Errorf("%q: String() %q does not parse back: %+v, %v", tc.in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", " ", "deployments.apps/", "a/b/c", ".apps"} {
		if r, err := admission.ParseResource(bad); err == nil {
			t.Errorf("ParseResource(%q) = %+v, want an error", bad, r)
		}
	}
}
