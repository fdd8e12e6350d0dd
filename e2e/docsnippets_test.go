package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/cmd/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/deploy/helm"
)

// The newcomer's path (#27): every shell and Go snippet of README.md and
// docs/clients.md, docs/kubernetes.md's Helm command and the README's
// Istio block run here, as a reader pastes them, against the real binary.
// The snippets are read from the markdown on every run, so the docs and
// the test cannot drift; the only changes are placeholders filled in
// (addresses the test's gateway listens on, a token digest, a CIDR), each
// named where it is made. TestDocSnippetsAllRun fails on a new block no
// test runs.

// mdBlock is one fenced block of a markdown file.
type mdBlock struct {
	file, section, lang, text string
}

func (b mdBlock) String() string { return fmt.Sprintf("%s %q ```%s", b.file, b.section, b.lang) }

// mdBlocks returns the fenced blocks of the repository file rel, each with
// the "## " section it is in.
func mdBlocks(t *testing.T, rel string) []mdBlock {
	t.Helper()
	f, err := os.ReadFile(filepath.Join(fencegatetest.Root(), rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []mdBlock
	var section string
	var cur *mdBlock
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur != nil && strings.HasPrefix(line, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &mdBlock{file: rel, section: section, lang: strings.TrimPrefix(line, "```")}
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		}
	}
	if cur != nil {
		t.Fatalf("%s: an unterminated code block in %q", rel, section)
	}
	return out
}

// snippet is the one block of lang in section of rel; it fails the test
// unless there is exactly one.
func snippet(t *testing.T, rel, section, lang string) string {
	t.Helper()
	var found []mdBlock
	for _, b := range mdBlocks(t, rel) {
		if b.section == section && b.lang == lang {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d ```%s blocks in %q, want 1", rel, len(found), lang, section)
	}
	return found[0].text
}

// runShell runs script with bash (errexit, nounset, pipefail) in dir with
// env added, and returns its combined output; a failing step fails it.
func runShell(ctx context.Context, dir, script string, env ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// binDir is a directory holding `fencegate` (the binary under test), to
// put first on PATH: the snippets call it by name.
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(binary, filepath.Join(dir, "fencegate")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDocSnippetsAllRun: every code block of README.md and docs/clients.md
// with a language is run by a test below (or, for the resource-side
// check's Go, by examples/orders/readme_test.go, which compiles and serves
// it). A block added without a test fails here; so does a block this list
// names that the docs lost.
func TestDocSnippetsAllRun(t *testing.T) {
	runBy := map[string]string{
		"README.md Two commands sh":                    "TestREADMECurlSession starts `fencegate serve` on the embedded store as line 1 does; line 2 is `make test`, this suite",
		"README.md A session with curl sh":             "TestREADMECurlSession",
		"README.md The resource-side check go":         "examples/orders/readme_test.go",
		"README.md The resource-side check js":         "examples/orders-node/test/readme.test.js (make test-js)",
		"README.md Behind Istio yaml":                  "TestREADMEIstio",
		"README.md Behind Istio sh":                    "TestREADMEIstio",
		"docs/clients.md The command line sh":          "",
		"docs/clients.md `fencegate lock annotate` sh": "TestClientsLockAnnotate",
		"docs/clients.md The Go client go":             "TestClientsGoProgram",
	}
	seen := map[string]bool{}
	for _, rel := range []string{"README.md", "docs/clients.md"} {
		for _, b := range mdBlocks(t, rel) {
			if b.lang == "" {
				continue // a diagram
			}
			id := b.file + " " + b.section + " " + b.lang
			seen[id] = true
			if by, ok := runBy[id]; !ok || by == "" {
				t.Errorf("%s: no test runs this block; add one to e2e/docsnippets_test.go", b)
			}
		}
	}
	for id, by := range runBy {
		if by != "" && !seen[id] {
			t.Errorf("%s: the block %s runs is gone from the docs", id, by)
		}
	}
	// The marker examples/orders's test reads the resource-side block by.
	readme, err := os.ReadFile(filepath.Join(fencegatetest.Root(), "README.md"))
	for _, marker := range []string{"examples/orders/readme_test.go", "examples/orders-node/test/readme.test.js"} {
		if err != nil || !bytes.Contains(readme, []byte("<!-- "+marker+" -->")) {
			t.Errorf("README.md lost the marker %s finds its block by (%v)", marker, err)
		}
	}
}

// curlSessionProblem says what the curl session's output lacks, in order.
func curlSessionProblem(out string) string {
	rest := out
	for _, want := range []string{`"ok":true,"lockId":"`, `"reason":"locked"`, `"locked":true`, `"lockIdHash":"`,
		"\n200\n", `{"ok":true,"expiresAtMs":`, `{"ok":true}`, `"error":"not-held"`, "}409", `"reason":"not-held"`} {
		i := strings.Index(rest, want)
		if i < 0 {
			return fmt.Sprintf("lacks %q (in this order)", want)
		}
		rest = rest[i+len(want):]
	}
	return ""
}

// TestREADMECurlSession runs the README's curl session as pasted, against
// `fencegate serve` on the embedded store (the README's first command;
// the one placeholder: F, the gateway's address). The broken variant is
// the session as it was written before (a fixed lockId and fence from the
// README's own run): the check catches it.
func TestREADMECurlSession(t *testing.T) {
	needTool(t, "curl", "curl")
	needTool(t, "jq", "jq")
	script := snippet(t, "README.md", "A session with curl", "sh")
	if !strings.HasPrefix(script, "F=localhost:8080\n") {
		t.Fatalf("the session no longer starts with F=localhost:8080:\n%s", script)
	}
	for _, tc := range []struct {
		name   string
		edit   func(string) string
		broken bool
	}{
		{"as written", func(s string) string { return s }, false},
		{"broken: a fixed lockId and fence", func(s string) string {
			s = strings.ReplaceAll(s, `"'"$LOCK_ID"'"`, "p8s1m66P1k_mBCcoO-Qe2Q")
			return strings.ReplaceAll(s, `"x-fence-token: $FENCE"`, "'x-fence-token: 006004209855000'")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := StartGateway(t, "bolt://./fencegate.db", "--log-level", "info")
			s := strings.Replace(tc.edit(script), "F=localhost:8080", "F="+g.HTTP, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := runShell(ctx, t.TempDir(), s)
			p := curlSessionProblem(out)
			if err != nil && p == "" {
				p = err.Error()
			}
			switch {
			case !tc.broken && p != "":
				t.Fatalf("the README's curl session: %s:\n%s", p, out)
			case tc.broken && p == "":
				t.Fatalf("the check passed the session with a fixed lockId and fence:\n%s", out)
			}
		})
	}
}

// TestREADMEIstio runs the README's "Behind Istio" block end to end: the
// YAML as fencegate.yaml, then each command (the proof key written,
// routes check, routes istio rendering an AuthorizationPolicy and a
// DestinationRule (kubectl apply: the YAML is parsed here instead, and
// deploy/mesh dry-runs the generator's output on a kube-apiserver), serve
// starting), then a routed write with the acquire's signed proof passes
// and one without it is refused 403. The broken variant, the block as it
// was (no proof.keys), must be refused by routes check and by serve.
func TestREADMEIstio(t *testing.T) {
	table := snippet(t, "README.md", "Behind Istio", "yaml")
	commands := snippet(t, "README.md", "Behind Istio", "sh")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fencegate.yaml")
	if err := os.WriteFile(cfg, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + binDir(t) + string(os.PathListSeparator) + os.Getenv("PATH")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var served bool
	for line := range strings.Lines(commands) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasSuffix(line, "| kubectl apply -f -"):
			out, err := runShell(ctx, dir, strings.TrimSuffix(line, "| kubectl apply -f -"), path)
			if err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			kinds := yamlKinds(t, out)
			if !slices.Contains(kinds, "AuthorizationPolicy") || !slices.Contains(kinds, "DestinationRule") {
				t.Fatalf("%s rendered %v, want an AuthorizationPolicy and a DestinationRule", line, kinds)
			}
		case strings.HasPrefix(line, "fencegate serve "):
			// Placeholders: the store (bolt in this test's directory) and
			// loopback listeners on free ports; the key file's path made
			// absolute, since the gateway runs in a directory of its own.
			abs := strings.ReplaceAll(table, "privateKeyFile: proof-k1.key", "privateKeyFile: "+filepath.Join(dir, "proof-k1.key"))
			if abs == table {
				t.Fatal("the Istio block no longer names privateKeyFile: proof-k1.key")
			}
			absCfg := filepath.Join(dir, "serve.yaml")
			if err := os.WriteFile(absCfg, []byte(abs), 0o600); err != nil {
				t.Fatal(err)
			}
			g := StartGateway(t, "bolt://./istio.db", "--config", absCfg, "--log-level", "info")
			served = true
			acq := Do(t, g.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"orders/42","ttlMs":30000}`})
			fence, _ := acq.JSON["fence"].(string)
			proof, _ := acq.JSON["proof"].(string)
			if acq.Status != 200 || fence == "" || proof == "" {
				t.Fatalf("acquire: %d %s: want a fence and a proof", acq.Status, acq.Body)
			}
			if code := extAuthz(t, g, "PUT", "/orders/42", map[string]string{"x-fence-token": fence, "x-fence-proof": proof}, nil); code != 200 {
				t.Errorf("a routed write with its signed proof: %d, want 200", code)
			}
			if code := extAuthz(t, g, "PUT", "/orders/42", map[string]string{"x-fence-token": fence}, nil); code != 403 {
				t.Errorf("a routed write without a proof: %d, want 403", code)
			}
		default:
			if out, err := runShell(ctx, dir, line, path); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		}
	}
	if !served {
		t.Fatal("the Istio block no longer starts fencegate serve")
	}

	// The broken variant: the block as it was, without proof.keys.
	var kept []string
	skip := false
	for line := range strings.Lines(table) {
		switch {
		case strings.HasPrefix(line, "proof:"):
			skip = true
		case skip && strings.HasPrefix(line, "  "):
		default:
			skip = false
			kept = append(kept, line)
		}
	}
	old := filepath.Join(dir, "old.yaml")
	if err := os.WriteFile(old, []byte(strings.Join(kept, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"routes", "check", "--config", old, "--request", "PUT https://api.example.com/orders/42"},
		{"serve", "--config", old, "--store", "bolt://" + filepath.Join(dir, "old.db"), "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--authz-addr", "127.0.0.1:0"},
	} {
		cmd := exec.CommandContext(ctx, binary, args...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "proof: signed needs a key") {
			t.Errorf("fencegate %s without proof.keys: %v, want exit 2 naming the missing key:\n%s", args[0], err, out)
		}
	}
}

// yamlKinds lists the kinds of the YAML documents in s.
func yamlKinds(t *testing.T, s string) []string {
	t.Helper()
	var kinds []string
	dec := yaml.NewDecoder(strings.NewReader(s))
	for {
		var doc struct {
			Kind string `yaml:"kind"`
		}
		err := dec.Decode(&doc)
		if err == io.EOF {
			return kinds
		}
		if err != nil {
			t.Fatalf("the output is not YAML: %v\n%s", err, s)
		}
		if doc.Kind != "" {
			kinds = append(kinds, doc.Kind)
		}
	}
}

// TestKubernetesHelmInstall renders docs/kubernetes.md's `helm install`
// line with the real helm (`helm template`: the same arguments and the
// same rendering, without a cluster), placeholders filled: the store URL,
// the digest `fencegate token` prints, a CIDR. The broken variant, the
// line without networkPolicy.webhookFrom (as it was), must be refused.
func TestKubernetesHelmInstall(t *testing.T) {
	helmBin, err := helm.Binary()
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(snippet(t, "docs/kubernetes.md", "Deploy", "sh")) {
		if strings.HasPrefix(l, "helm install ") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatal("docs/kubernetes.md's Deploy block has no helm install line")
	}
	tok, err := exec.Command(binary, "token", "--name", "orders", "--prefixes", "orders/").CombinedOutput()
	digest := regexp.MustCompile(`\b[0-9a-f]{64}\b`).FindString(string(tok))
	if err != nil || digest == "" {
		t.Fatalf("fencegate token: %v\n%s", err, tok)
	}
	fill := strings.NewReplacer("rediss://…", "rediss://redis.data.svc:6379/0", "<from fencegate token>", digest,
		"<the API server's CIDR>", "10.0.0.0/8", "helm install ", "'"+helmBin+"' template ")
	filled := fill.Replace(line)
	for _, p := range []string{"…", "<", ">"} {
		if strings.Contains(strings.TrimPrefix(filled, "'"+helmBin+"'"), p) {
			t.Fatalf("a placeholder is left unfilled (%q): %s", p, filled)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := runShell(ctx, fencegatetest.Root(), filled)
	if err != nil || !strings.Contains(out, "kind: Deployment") || !strings.Contains(out, "10.0.0.0/8") {
		t.Fatalf("%s: %v\n%s", filled, err, out)
	}
	without := regexp.MustCompile(` --set 'networkPolicy\.webhookFrom=[^']*'`).ReplaceAllString(filled, "")
	if without == filled {
		t.Fatal("the broken variant did not remove networkPolicy.webhookFrom")
	}
	if out, err := runShell(ctx, fencegatetest.Root(), without); err == nil || !strings.Contains(out, "webhookFrom") {
		t.Fatalf("the line without networkPolicy.webhookFrom rendered (%v):\n%s", err, out)
	}
}

// fenceRecorder stands for the API behind the edge in the client snippets:
// it records the fence headers of each write.
type fenceRecorder struct {
	mu     sync.Mutex
	writes []http.Header
}

func (f *fenceRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.writes = append(f.writes, r.Header.Clone())
	f.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// TestClientsGoProgram runs docs/clients.md's Go program with go run,
// against the gateway (placeholder: its address for 127.0.0.1:8080) and a
// recording API for http://edge: the PUT must carry the key orders/42 and
// the fence of a lock the gateway issued.
func TestClientsGoProgram(t *testing.T) {
	src := snippet(t, "docs/clients.md", "The Go client", "go")
	g := StartGateway(t, "bolt://./clients.db", "--log-level", "info")
	rec := &fenceRecorder{}
	api := httptest.NewServer(rec)
	defer api.Close()
	filled := strings.NewReplacer(`"http://127.0.0.1:8080"`, `"`+g.URL()+`"`, `"http://edge/`, `"`+api.URL+`/`).Replace(src)
	if filled == src {
		t.Fatal("the program no longer names http://127.0.0.1:8080 and http://edge")
	}
	// Inside the module (testdata: not part of ./...), so its imports
	// resolve to this checkout.
	root := fencegatetest.Root()
	testdata := filepath.Join(root, "e2e", "testdata")
	if _, err := os.Stat(testdata); os.IsNotExist(err) {
		if err := os.Mkdir(testdata, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(testdata) })
	}
	dir, err := os.MkdirTemp(testdata, "clients-snippet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(filled), 0o600); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./"+filepath.ToSlash(rel))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FENCEGATE_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run docs/clients.md's program: %v\n%s", err, out)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.writes) != 1 || rec.writes[0].Get("x-fence-key") != "orders/42" || !regexp.MustCompile(`^\d{15}$`).MatchString(rec.writes[0].Get("x-fence-token")) {
		t.Fatalf("the API saw %v, want one PUT with x-fence-key orders/42 and a fence\n%s", rec.writes, out)
	}
}

// TestClientsLockAnnotate runs docs/clients.md's `lock run … lock annotate
// --patch` line against the gateway (FENCEGATE_SERVER), with kubectl
// replaced by a script that records the patch it is given (the webhook's
// side of it runs against a kube-apiserver in e2e/kube): the patch must
// carry the key and the fence lock run held.
func TestClientsLockAnnotate(t *testing.T) {
	line := strings.TrimSpace(strings.ReplaceAll(snippet(t, "docs/clients.md", "`fencegate lock annotate`", "sh"), "\\\n", ""))
	g := StartGateway(t, "bolt://./annotate.db", "--log-level", "info")
	bin := binDir(t)
	got := filepath.Join(t.TempDir(), "kubectl-args")
	kubectl := "#!/bin/sh\nprintf '%s\\n' \"$@\" > '" + got + "'\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(kubectl), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := runShell(ctx, t.TempDir(), line, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FENCEGATE_SERVER="+g.URL())
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	args, err := os.ReadFile(got)
	if err != nil {
		t.Fatalf("kubectl was not run: %v\n%s", err, out)
	}
	if !strings.Contains(string(args), "patch\nconfigmap\nsettings\n") || !strings.Contains(string(args), `"cm/settings"`) ||
		!regexp.MustCompile(`"\d{15}"`).Match(args) {
		t.Fatalf("kubectl got %q: want a merge patch with the key cm/settings and a fence", args)
	}
}
