// Package envoy holds fencegate's shipped Envoy configurations; its test
// proves Envoy's own schema would accept them.
package envoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	// The typed_config extensions the shipped configs use, registered so
	// protojson can resolve their "@type" URLs.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// loadBootstrap parses an Envoy YAML config the way Envoy does (YAML →
// JSON → proto, unknown fields rejected) and validates it: every message's
// protoc-gen-validate rules, including those inside typed_config Anys, and
// that every cluster a route or gRPC service names is defined.
func loadBootstrap(yamlText []byte) (*bootstrapv3.Bootstrap, error) {
	var doc any
	if err := yaml.Unmarshal(yamlText, &doc); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml → json: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, &b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	var clustersUsed []string
	err = validateDeep(&b, func(m protoreflect.Message) {
		switch v := m.Interface().(type) {
		case *routev3.RouteAction:
			if c := v.GetCluster(); c != "" {
				clustersUsed = append(clustersUsed, c)
			}
		case *corev3.GrpcService_EnvoyGrpc:
			clustersUsed = append(clustersUsed, v.GetClusterName())
		}
	})
	if err != nil {
		return nil, err
	}
	defined := map[string]bool{}
	for _, c := range b.GetStaticResources().GetClusters() {
		defined[c.GetName()] = true
	}
	for _, c := range clustersUsed {
		if !defined[c] {
			return nil, fmt.Errorf("cluster %q is referenced but not defined", c)
		}
	}
	return &b, nil
}

// validateDeep runs ValidateAll on m and on every message packed in an Any
// below it (ValidateAll stops at Any boundaries), calling visit on every
// message it walks.
func validateDeep(m proto.Message, visit func(protoreflect.Message)) error {
	var errs []error
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	var walk func(protoreflect.Message)
	walk = func(pm protoreflect.Message) {
		visit(pm)
		if a, ok := pm.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
				return
			}
			errs = append(errs, validateDeep(inner, visit))
			return
		}
		pm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return errors.Join(errs...)
}

// TestShippedConfigsValidate loads every Envoy YAML in this folder.
func TestShippedConfigsValidate(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Envoy configs found: %v", err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := loadBootstrap(text); err != nil {
				t.Fatalf("%s would be rejected: %v", f, err)
			}
		})
	}
}

// TestFrontProxyShape pins what envoy.yaml promises fencegate's users.
func TestFrontProxyShape(t *testing.T) {
	text, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadBootstrap(text)
	if err != nil {
		t.Fatal(err)
	}
	s, err := stableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"transportApiVersion":"V3"`,
		`"clusterName":"fencegate_authz"`,
		`"timeout":"0.250s"`,
		`"statusOnError":{"code":"ServiceUnavailable"}`,
		`"disabled":true`,
		`"fence_key":"orders/{2:int}"`,
		`"fence_mode":"dry-run"`,
		`"fence_proof":"signed"`,
		`"requestHeadersToRemove":["x-fence-lock-id"]`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("envoy.yaml lacks %s", want)
		}
	}
	if strings.Contains(s, `"failureModeAllow":true`) || strings.Contains(s, `"withRequestBody"`) {
		t.Error("envoy.yaml must fail closed and never buffer request bodies")
	}
}

// TestBrokenConfigsFail: the validation can fail. Each copy of envoy.yaml
// carries one mistake Envoy would reject at startup.
func TestBrokenConfigsFail(t *testing.T) {
	text, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	orig := string(text)
	tests := []struct{ name, from, to string }{
		{"misspelt field", "failure_mode_allow: false", "failure_mode_alow: false"},
		{"empty cluster inside typed_config", "envoy_grpc: { cluster_name: fencegate_authz }", `envoy_grpc: { cluster_name: "" }`},
		{"bad duration inside typed_config", "timeout: 0.25s", "timeout: soon"},
		{"unknown extension type", "ext_authz.v3.ExtAuthzPerRoute", "ext_authz.v3.ExtAuthzPerRouteX"},
		{"undefined cluster", "route: { cluster: upstream, timeout: 15s }", "route: { cluster: nowhere, timeout: 15s }"},
		{"port out of range", "port_value: 10000", "port_value: 100000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(orig, tc.from) {
				t.Fatalf("envoy.yaml no longer contains %q; update the test", tc.from)
			}
			broken := strings.Replace(orig, tc.from, tc.to, 1)
			if _, err := loadBootstrap([]byte(broken)); err == nil {
				t.Fatalf("a config with %s validated", tc.name)
			} else {
				t.Logf("rejected as expected: %v", err)
			}
		})
	}
}

// checkExtProcShape pins what envoy-extproc.yaml promises: the modes the
// barrier needs (request and response headers sent, bodies never), fail
// closed with 503, a message timeout above fencegate's budget, and the
// barrier asked for on the orders route.
func checkExtProcShape(text []byte) error {
	b, err := loadBootstrap(text)
	if err != nil {
		return err
	}
	s, err := stableJSON(b)
	if err != nil {
		return err
	}
	var errs []error
	for _, want := range []string{
		`"requestHeaderMode":"SEND"`,
		`"responseHeaderMode":"SEND"`,
		`"messageTimeout":"0.500s"`,
		`"statusOnError":{"code":"ServiceUnavailable"}`,
		`"key":"fence_barrier","value":"on"`,
		`"key":"fence_key","value":"orders/{2:int}"`,
		`"maxStreamDuration":{"maxStreamDuration":"25s"}`,
		`"serviceName":"envoy.service.ext_proc.v3.ExternalProcessor"`,
		`"requestHeadersToRemove":["x-fence-lock-id"]`,
	} {
		if !strings.Contains(s, want) {
			errs = append(errs, fmt.Errorf("lacks %s", want))
		}
	}
	// NONE is the body modes' zero value, so any body mode in the JSON
	// means bodies would be sent.
	if strings.Contains(s, `BodyMode"`) {
		errs = append(errs, errors.New("must never send bodies (request_body_mode, response_body_mode NONE)"))
	}
	if strings.Contains(s, `"failureModeAllow":true`) || strings.Contains(s, `"observabilityMode":true`) {
		errs = append(errs, errors.New("must fail closed and wait for fencegate's answers"))
	}
	return errors.Join(errs...)
}

func TestExtProcShape(t *testing.T) {
	text, err := os.ReadFile("envoy-extproc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExtProcShape(text); err != nil {
		t.Fatal(err)
	}
	// The check can fail: each copy carries one mistake that would break
	// the barrier or the fail-closed promise, or that Envoy would reject.
	for _, tc := range []struct{ name, from, to string }{
		{"response headers skipped", "response_header_mode: SEND", "response_header_mode: SKIP"},
		{"fails open", "failure_mode_allow: false", "failure_mode_allow: true"},
		{"bodies buffered", "request_body_mode: NONE", "request_body_mode: BUFFERED"},
		{"unknown mode", "request_header_mode: SEND", "request_header_mode: MAYBE"},
		{"misspelt field", "message_timeout: 0.5s", "message_timout: 0.5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(text), tc.from) {
				t.Fatalf("envoy-extproc.yaml no longer contains %q; update the test", tc.from)
			}
			if err := checkExtProcShape([]byte(strings.Replace(string(text), tc.from, tc.to, 1))); err == nil {
				t.Fatalf("a config with %s passed", tc.name)
			}
		})
	}
}

// stableJSON renders m as compact JSON with sorted keys. protojson's own
// output varies its whitespace from run to run on purpose, so substring
// checks must not read it directly.
func stableJSON(m proto.Message) (string, error) {
	js, err := protojson.Marshal(m)
	if err != nil {
		return "", err
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}
