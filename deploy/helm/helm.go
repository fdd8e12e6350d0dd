// Package helm renders fencegate's Helm chart (the fencegate folder here)
// with a real helm binary, which build.sh builds from the Go module proxy into
// ${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/helm/<version>. The chart's
// tests, deploy/k8s (rendered from the chart) and the image tests use it.
package helm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Version is the helm release build.sh builds; keep them in step (a test
// checks).
const Version = "v3.22.0"

// CacheDir is where build.sh puts helm: ${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/helm.
func CacheDir() (string, error) {
	if d := os.Getenv("FENCEGATE_CACHE"); d != "" {
		return filepath.Join(d, "helm"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("helm: locate the binary cache: %w", err)
	}
	return filepath.Join(home, ".cache", "fencegate", "helm"), nil
}

// Binary returns the path of the helm binary, or an error naming build.sh
// and `make test` when it is missing.
func Binary() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, Version, "helm")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("helm: %s is missing: run `make test` (or `make helm-bin`, i.e. `bash deploy/helm/build.sh`); it builds helm %s into %s", p, Version, dir)
	}
	return p, nil
}

// ChartDir is the chart's directory in this checkout.
func ChartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "fencegate")
}

// Run runs helm with args and returns its standard output; a failure
// carries its standard error. HELM_* state directories point into a
// throwaway directory so no user's helm configuration leaks in.
func Run(ctx context.Context, args ...string) ([]byte, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	state, err := os.MkdirTemp("", "fencegate-helm-")
	if err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	defer os.RemoveAll(state)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(state, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(state, "config"),
		"HELM_DATA_HOME="+filepath.Join(state, "data"),
		"KUBECONFIG="+filepath.Join(state, "kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// Template renders the chart as release into namespace with extra helm
// arguments (--set, -f, …).
func Template(ctx context.Context, release, namespace string, args ...string) ([]byte, error) {
	return Run(ctx, append([]string{"template", release, ChartDir(), "--namespace", namespace}, args...)...)
}

// Sources splits helm template's output by the template each part came from
// ("templates/deployment.yaml" → its documents, "---"-joined, without the
// "# Source:" lines), in template order.
func Sources(rendered []byte) (names []string, bySource map[string]string) {
	bySource = map[string]string{}
	var cur string
	var buf strings.Builder
	flush := func() {
		if cur == "" {
			return
		}
		body := strings.TrimSpace(buf.String())
		body = strings.TrimSuffix(body, "---")
		body = strings.TrimSpace(body)
		if body == "" {
			return
		}
		if prev, ok := bySource[cur]; ok {
			bySource[cur] = prev + "\n---\n" + body + "\n"
		} else {
			names = append(names, cur)
			bySource[cur] = body + "\n"
		}
	}
	for _, line := range strings.SplitAfter(string(rendered), "\n") {
		if src, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "# Source: "); ok {
			flush()
			_, cur, _ = strings.Cut(src, "/") // drop the chart name
			buf.Reset()
			continue
		}
		if strings.TrimRight(line, "\n") == "---" && buf.Len() == 0 {
			continue
		}
		buf.WriteString(line)
	}
	flush()
	return names, bySource
}
