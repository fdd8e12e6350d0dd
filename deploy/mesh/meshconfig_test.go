package mesh_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// protoFields reads a .proto file and returns, per message name (nested
// ones by their own name), its fields' JSON names (lowerCamelCase) and
// types; the fields of a oneof belong to its message.
func protoFields(src []byte) map[string]map[string]string {
	out := map[string]map[string]string{}
	field := regexp.MustCompile(`^\s*(?:repeated\s+|optional\s+)?([\w.]+(?:<[^>]+>)?)\s+(\w+)\s*=\s*\d+`)
	open := regexp.MustCompile(`^\s*(message|oneof|enum)\s+(\w+)\s*\{`)
	type scope struct{ kind, name string }
	var stack []scope
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		if m := open.FindStringSubmatch(line); m != nil {
			if m[1] == "message" && out[m[2]] == nil {
				out[m[2]] = map[string]string{}
			}
			if !strings.Contains(line, "}") { // not an empty "message X {}"
				stack = append(stack, scope{m[1], m[2]})
			}
			continue
		}
		if strings.Contains(line, "}") && !strings.Contains(line, "{") {
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		m := field.FindStringSubmatch(line)
		if m == nil || len(stack) == 0 {
			continue
		}
		// The innermost message (a oneof's fields are its message's).
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i].kind == "enum" {
				break
			}
			if stack[i].kind == "message" {
				out[stack[i].name][lowerCamel(m[2])] = m[1]
				break
			}
		}
	}
	return out
}

func lowerCamel(snake string) string {
	parts := strings.Split(snake, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// checkAgainstProto walks v (decoded YAML) as message msg and lists every
// key that is not a field of it, and scalars of the wrong kind.
func checkAgainstProto(fields map[string]map[string]string, msg string, v any, at string) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: want an object (%s)", at, msg)}
	}
	var problems []string
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		typ, ok := fields[msg][k]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s.%s: not a field of Istio's %s", at, k, msg))
			continue
		}
		val := m[k]
		switch typ {
		case "string":
			if _, ok := val.(string); !ok {
				problems = append(problems, fmt.Sprintf("%s.%s: want a string", at, k))
			}
		case "bool":
			if _, ok := val.(bool); !ok {
				problems = append(problems, fmt.Sprintf("%s.%s: want a boolean", at, k))
			}
		case "uint32", "int32", "int64", "uint64":
			if _, ok := val.(int); !ok {
				problems = append(problems, fmt.Sprintf("%s.%s: want an integer", at, k))
			}
		case "google.protobuf.Duration":
			if s, ok := val.(string); !ok || !regexp.MustCompile(`^-?[0-9]+(\.[0-9]{1,9})?s$`).MatchString(s) {
				problems = append(problems, fmt.Sprintf("%s.%s: want a protobuf JSON duration (\"0.250s\")", at, k))
			}
		default:
			if list, ok := val.([]any); ok {
				for i, e := range list {
					problems = append(problems, checkAgainstProto(fields, typ, e, fmt.Sprintf("%s.%s[%d]", at, k, i))...)
				}
			} else {
				problems = append(problems, checkAgainstProto(fields, typ, val, at+"."+k)...)
			}
		}
	}
	return problems
}

// TestMeshConfigFields: the meshConfig snippet is not a Kubernetes object,
// so no API server checks it; this checks each of its keys and scalars
// against Istio's own MeshConfig proto (mesh/v1alpha1/config.proto in
// istio.io/api at the version whose CRDs the dry run installs), and that
// the proto offers no ext_proc provider. Broken variants (a misspelt key,
// an ext_proc provider, a port as a string, a Go-style duration) are
// caught.
func TestMeshConfigFields(t *testing.T) {
	var src crdSource
	for _, s := range crdSources {
		if s.module == "istio.io/api" {
			src = s
		}
	}
	proto, err := os.ReadFile(filepath.Join(moduleDir(t, src.module, src.version), "mesh", "v1alpha1", "config.proto"))
	if err != nil {
		t.Fatal(err)
	}
	fields := protoFields(proto)
	if fields["MeshConfig"]["extensionProviders"] == "" || fields["EnvoyExternalAuthorizationGrpcProvider"]["service"] == "" {
		t.Fatalf("config.proto was not read: %v", fields["MeshConfig"])
	}
	for f := range fields["ExtensionProvider"] {
		if strings.Contains(strings.ToLower(f), "proc") {
			t.Errorf("istio.io/api %s offers an ext_proc extension provider (%s): ship one for barrier entries", src.version, f)
		}
	}
	good, err := os.ReadFile("../istio/meshconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	check := func(doc []byte) []string {
		var v struct {
			MeshConfig any `yaml:"meshConfig"`
		}
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return []string{err.Error()}
		}
		return checkAgainstProto(fields, "MeshConfig", v.MeshConfig, "meshConfig")
	}
	if p := check(good); len(p) > 0 {
		t.Fatalf("deploy/istio/meshconfig.yaml:\n%s", strings.Join(p, "\n"))
	}
	for _, tc := range []struct{ name, from, to string }{
		{"misspelt key", "failOpen:", "failopen:"},
		{"ext_proc provider", "envoyExtAuthzGrpc:", "envoyExtProc:"},
		{"port as a string", "port: 9191", "port: \"9191\""},
		{"Go duration", "timeout: 0.250s", "timeout: 250ms"},
	} {
		broken := bytes.Replace(good, []byte(tc.from), []byte(tc.to), 1)
		if bytes.Equal(broken, good) {
			t.Fatalf("%s: %q not in meshconfig.yaml", tc.name, tc.from)
		}
		if p := check(broken); len(p) == 0 {
			t.Errorf("%s: the broken snippet passed", tc.name)
		}
	}
}
