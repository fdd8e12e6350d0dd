package image_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/fencegate/fencegate/deploy/helm"
	"github.com/fencegate/fencegate/deploy/image"
	"github.com/fencegate/fencegate/deploy/k8s"
	"github.com/fencegate/fencegate/internal/testutil"
)

const testVersion = "v0.0.0-imagetest"

// goBuild builds pkg statically into dir and returns the binary's path.
func goBuild(t *testing.T, dir, pkg string, ldflags string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// built is the image the tool wrote, read back from its OCI layout, and its
// filesystem unpacked.
type built struct {
	img    v1.Image
	config *v1.ConfigFile
	root   string                 // the unpacked filesystem
	files  map[string]*tar.Header // by path, without the leading /
}

// buildImage builds fencegate (CGO_ENABLED=0) and runs cmd/fencegate-image on
// it, as `make image` does, then reads the layout back and unpacks it.
func buildImage(t *testing.T) built {
	t.Helper()
	dir := t.TempDir()
	bin := goBuild(t, dir, "github.com/fencegate/fencegate/cmd/fencegate", "-X main.version="+testVersion)
	tool := goBuild(t, t.TempDir(), "github.com/fencegate/fencegate/cmd/fencegate-image", "")
	out := filepath.Join(dir, "layout")
	if b, err := exec.Command(tool, "--binary", bin, "--version", testVersion, "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("fencegate-image: %v\n%s", err, b)
	}

	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("layout holds %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.MediaType != types.OCIManifestSchema1 || d.Annotations["org.opencontainers.image.ref.name"] != testVersion || d.ArtifactType != "" {
		t.Errorf("index entry %+v: want an OCI image manifest tagged %s", d, testVersion)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Every blob's digest and size as the manifest and config claim.
	if err := validate.Image(img); err != nil {
		t.Fatalf("the image does not validate: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	b := built{img: img, config: cf, root: t.TempDir(), files: map[string]*tar.Header{}}
	unpack(t, mutate.Extract(img), b.root, b.files)
	return b
}

// unpack writes the flattened filesystem to root (regular files and
// directories only; an image of ours has nothing else).
func unpack(t *testing.T, rc io.ReadCloser, root string, files map[string]*tar.Header) {
	t.Helper()
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Clean(h.Name), "/")
		if strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			t.Fatalf("unsafe path %q in the layer", h.Name)
		}
		files[name] = h
		p := filepath.Join(root, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o400)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Errorf("unexpected entry %s (type %c)", h.Name, h.Typeflag)
		}
	}
}

func TestImage(t *testing.T) {
	testutil.NeedService(t, "helm (make helm-bin)")
	b := buildImage(t)

	t.Run("config", func(t *testing.T) {
		c := b.config.Config
		if c.User != fmt.Sprintf("%d:%d", image.UID, image.GID) || image.UID == 0 {
			t.Errorf("user %q", c.User)
		}
		if !slices.Equal(c.Entrypoint, image.Entrypoint) || !slices.Equal(c.Cmd, []string{"serve"}) {
			t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
		}
		if c.WorkingDir != image.WorkDir {
			t.Errorf("working dir %q", c.WorkingDir)
		}
		if c.Labels[image.LabelVersion] != testVersion {
			t.Errorf("labels %v lack version %s", c.Labels, testVersion)
		}
		if b.config.OS != "linux" || b.config.Architecture == "" {
			t.Errorf("platform %s/%s", b.config.OS, b.config.Architecture)
		}
		layers, err := b.img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%d layers (%v), want 1: no base image", len(layers), err)
		}
	})

	t.Run("filesystem", func(t *testing.T) {
		var names []string
		for n := range b.files {
			names = append(names, n)
		}
		slices.Sort(names)
		want := []string{"etc", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt", "fencegate", "tmp", "var", "var/lib", "var/lib/fencegate"}
		if !slices.Equal(names, want) {
			t.Errorf("image files %v, want %v", names, want)
		}
		// The process cannot rewrite its own binary; it owns only its
		// working directory.
		if h := b.files["fencegate"]; h == nil || h.Uid != 0 || h.Mode&0o222 != 0 || h.Mode&0o111 == 0 {
			t.Errorf("binary entry %+v: want root-owned, executable, read-only", h)
		}
		if h := b.files["var/lib/fencegate"]; h == nil || h.Uid != image.UID || h.Gid != image.GID {
			t.Errorf("working dir entry %+v: want owned by %d", h, image.UID)
		}
		if h := b.files["tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
			t.Errorf("/tmp entry %+v: want mode 1777", h)
		}
	})

	shipped := deploymentFrom(t, "deploy/k8s", mustRead(t, k8s.Files, "deployment.yaml"))
	rendered, err := helm.Template(context.Background(), "fencegate", "fencegate", helm.Required...)
	if err != nil {
		t.Fatal(err)
	}
	chart := deploymentFrom(t, "the chart", rendered)
	for _, dep := range []namedDeployment{shipped, chart} {
		t.Run("matches "+dep.source, func(t *testing.T) {
			for _, err := range agree(b.config.Config, dep.Deployment) {
				t.Error(err)
			}
		})
	}

	t.Run("runs", func(t *testing.T) {
		bin := filepath.Join(b.root, "fencegate")
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), testVersion) {
			t.Fatalf("fencegate version: %v: %s (want %s)", err, out, testVersion)
		}
		// serve as the image would (its working directory, the default
		// bolt store there) with loopback listeners; every probe path the
		// manifests use must answer 200.
		port := testutil.FreePort(t)
		cmd := exec.Command(bin, "serve", "--http-addr", "127.0.0.1:"+strconv.Itoa(port),
			"--grpc-addr", "off", "--authz-addr", "off", "--admission-addr", "off")
		cmd.Dir = filepath.Join(b.root, image.WorkDir)
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		defer func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("serve output:\n%s", logs.String())
			}
		}()
		paths := map[string]bool{}
		for _, dep := range []namedDeployment{shipped, chart} {
			for _, p := range probes(dep.Spec.Template.Spec.Containers[0]) {
				paths[p.HTTPGet.Path] = true
			}
		}
		if !paths["/healthz"] || !paths["/readyz"] {
			t.Fatalf("probe paths %v lack /healthz or /readyz", paths)
		}
		for p := range paths {
			waitOK(t, fmt.Sprintf("http://127.0.0.1:%d%s", port, p), done)
		}
		if _, err := os.Stat(filepath.Join(cmd.Dir, "fencegate.db")); err != nil {
			t.Errorf("the default store is not in the working directory: %v", err)
		}
	})
}

// waitOK polls url until it answers 200, the process exits, or a minute
// passes.
func waitOK(t *testing.T, url string, exited <-chan error) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("serve exited (%v) before %s answered", err, url)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no 200 within a minute (last: %v)", url, err)
		}
	}
}

type namedDeployment struct {
	source string
	*appsv1.Deployment
}

func mustRead(t *testing.T, fsys interface{ ReadFile(string) ([]byte, error) }, name string) []byte {
	t.Helper()
	b, err := fsys.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deploymentFrom finds the one Deployment among YAML documents.
func deploymentFrom(t *testing.T, source string, docs []byte) namedDeployment {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(docs))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			t.Fatalf("no Deployment in %s", source)
		}
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if doc["kind"] != "Deployment" {
			continue
		}
		js, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := json.Unmarshal(js, &d); err != nil {
			t.Fatal(err)
		}
		return namedDeployment{source: source, Deployment: &d}
	}
}

func probes(c corev1.Container) []*corev1.Probe {
	var out []*corev1.Probe
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// agree lists every way a Deployment and the image config disagree: the user
// the pod runs as, the command line, the ports and the probes' ports.
func agree(c v1.Config, dep *appsv1.Deployment) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	uid, gid, _ := strings.Cut(c.User, ":")
	pod := dep.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsUser == nil || strconv.FormatInt(*psc.RunAsUser, 10) != uid {
		add("the pod's runAsUser is not the image's user %s", uid)
	}
	if psc == nil || psc.RunAsGroup == nil || strconv.FormatInt(*psc.RunAsGroup, 10) != gid {
		add("the pod's runAsGroup is not the image's group %s", gid)
	}
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		add("the pod does not set runAsNonRoot")
	}
	if len(pod.Containers) != 1 {
		add("%d containers, want 1", len(pod.Containers))
		return errs
	}
	ctr := pod.Containers[0]
	// The image's entrypoint runs with the container's args.
	if len(ctr.Command) != 0 {
		add("the container overrides the entrypoint with %q", ctr.Command)
	}
	if argv := append(slices.Clone(c.Entrypoint), ctr.Args...); len(argv) < 2 || argv[0] != image.Binary || argv[1] != "serve" {
		add("the container runs %q, not %s serve", argv, image.Binary)
	}
	exposed := map[int32]bool{}
	for p := range c.ExposedPorts {
		n, proto, _ := strings.Cut(p, "/")
		port, err := strconv.ParseInt(n, 10, 32)
		if err != nil || proto != "tcp" {
			add("exposed port %q", p)
		}
		exposed[int32(port)] = true
	}
	byName := map[string]int32{}
	for _, p := range ctr.Ports {
		byName[p.Name] = p.ContainerPort
		if !exposed[p.ContainerPort] {
			add("container port %s (%d) is not exposed by the image", p.Name, p.ContainerPort)
		}
		if want, ok := image.Ports[p.Name]; !ok || int32(want) != p.ContainerPort {
			add("container port %s is %d, the image's %s port is %d", p.Name, p.ContainerPort, p.Name, want)
		}
	}
	if len(ctr.Ports) != len(exposed) {
		add("the container declares %d ports, the image exposes %d", len(ctr.Ports), len(exposed))
	}
	for _, pr := range probes(ctr) {
		if pr.HTTPGet == nil {
			add("a probe is not an HTTP GET")
			continue
		}
		port := pr.HTTPGet.Port.IntVal
		if pr.HTTPGet.Port.StrVal != "" {
			port = byName[pr.HTTPGet.Port.StrVal]
		}
		if port != int32(image.Ports["http"]) {
			add("probe %s targets port %s (%d), not the http port %d", pr.HTTPGet.Path, pr.HTTPGet.Port.String(), port, image.Ports["http"])
		}
	}
	return errs
}

// The comparison must catch a Deployment that disagrees with the image, or
// the subtests above prove nothing.
func TestAgreeCatchesMismatches(t *testing.T) {
	cfg := v1.Config{User: "65532:65532", Entrypoint: image.Entrypoint, ExposedPorts: map[string]struct{}{}}
	for _, p := range image.Ports {
		cfg.ExposedPorts[strconv.Itoa(p)+"/tcp"] = struct{}{}
	}
	good := deploymentFrom(t, "deploy/k8s", mustRead(t, k8s.Files, "deployment.yaml"))
	if errs := agree(cfg, good.Deployment); len(errs) > 0 {
		t.Fatalf("the shipped deployment disagrees: %v", errs)
	}
	breaks := map[string]func(d *appsv1.Deployment){
		"root user": func(d *appsv1.Deployment) { u := int64(0); d.Spec.Template.Spec.SecurityContext.RunAsUser = &u },
		"other group": func(d *appsv1.Deployment) {
			g := int64(1000)
			d.Spec.Template.Spec.SecurityContext.RunAsGroup = &g
		},
		"command override": func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Command = []string{"/bin/sh"} },
		"subcommand repeated": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Args = []string{"--config", "/etc/fencegate/config.yaml"}
		},
		"port moved": func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort = 8081 },
		"port dropped": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Ports = d.Spec.Template.Spec.Containers[0].Ports[1:]
		},
		"probe on grpc": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Port.StrVal = "grpc"
		},
		"probe not http":   func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet = nil },
		"non-root not set": func(d *appsv1.Deployment) { d.Spec.Template.Spec.SecurityContext.RunAsNonRoot = nil },
	}
	for name, mutate := range breaks {
		d := good.DeepCopy()
		mutate(d)
		if errs := agree(cfg, d); len(errs) == 0 {
			t.Errorf("%s: agree found nothing wrong", name)
		}
	}
}

// The same inputs give the same image, byte for byte (timestamps are fixed),
// and a different input a different one.
func TestBuildIsReproducible(t *testing.T) {
	// Any static binary will do; the tool itself is a small one.
	bin := goBuild(t, t.TempDir(), "github.com/fencegate/fencegate/cmd/fencegate-image", "")
	digest := func(o image.Options) v1.Hash {
		t.Helper()
		img, err := image.Build(o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	o := image.Options{Binary: bin, Version: "v1.2.3"}
	first, second := digest(o), digest(o)
	if first != second {
		t.Fatalf("two builds of the same inputs: %s and %s", first, second)
	}
	o.Created = time.Unix(1700000000, 0)
	if digest(o) == first {
		t.Error("a different creation time gave the same digest: the check above proves nothing")
	}
	o.Created = time.Time{}
	o.Version = "v1.2.4"
	if digest(o) == first {
		t.Error("a different version gave the same digest")
	}
}

// A dynamically linked binary cannot run on an empty image: Build refuses it.
func TestBuildRefusesDynamicBinary(t *testing.T) {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if _, err := image.Build(image.Options{Binary: p, Version: "v1"}); !errors.Is(err, image.ErrNotStatic) {
			t.Fatalf("Build(%s): %v, want ErrNotStatic", p, err)
		}
		return
	}
	t.Fatal("no dynamically linked /bin/true to test with")
}

// The Dockerfile builds the same image for those with a container engine:
// user, working directory, entrypoint, cmd and ports as the package says, a
// static build, and the Go version of go.mod.
func TestDockerfileAgrees(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	checkDockerfile(t, df, nil)
	// And the check catches a Dockerfile that drifted.
	for _, tc := range [][2]string{
		{"USER 65532:65532", "USER root"},
		{`ENTRYPOINT ["/fencegate"]`, `ENTRYPOINT ["/fencegate", "serve"]`},
		{"EXPOSE 8080 9090 9191 8443", "EXPOSE 8080 9090 9191"},
		{"CGO_ENABLED=0 go build", "go build"},
		{"FROM scratch", "FROM debian"},
	} {
		broken := bytes.Replace(df, []byte(tc[0]), []byte(tc[1]), 1)
		if bytes.Equal(broken, df) {
			t.Fatalf("%q not in the Dockerfile", tc[0])
		}
		var problems []string
		checkDockerfile(t, broken, &problems)
		if len(problems) == 0 {
			t.Errorf("replacing %q with %q went unnoticed", tc[0], tc[1])
		}
	}
}

// checkDockerfile reports disagreements to t, or into problems when given.
func checkDockerfile(t *testing.T, df []byte, problems *[]string) {
	t.Helper()
	report := func(format string, a ...any) {
		if problems != nil {
			*problems = append(*problems, fmt.Sprintf(format, a...))
			return
		}
		t.Errorf(format, a...)
	}
	// Instructions of the final stage (after the last FROM), continuation
	// lines joined.
	var stages [][]string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(df))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" && cur.Len() == 0 {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		ins := cur.String()
		cur.Reset()
		if strings.HasPrefix(ins, "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], ins)
		}
	}
	if len(stages) < 2 {
		report("the Dockerfile is not multi-stage")
		return
	}
	final := stages[len(stages)-1]
	want := map[string]string{
		"FROM":       "scratch",
		"USER":       fmt.Sprintf("%d:%d", image.UID, image.GID),
		"WORKDIR":    image.WorkDir,
		"ENTRYPOINT": mustJSON(image.Entrypoint),
		"CMD":        mustJSON(image.Cmd),
	}
	var ports []string
	for _, p := range image.Ports {
		ports = append(ports, strconv.Itoa(p))
	}
	slices.Sort(ports)
	got := map[string]string{}
	for _, ins := range final {
		op, arg, _ := strings.Cut(ins, " ")
		switch op {
		case "EXPOSE":
			f := strings.Fields(arg)
			slices.Sort(f)
			got[op] = strings.Join(f, " ")
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(arg), &v); err != nil {
				report("%s %s is not the exec form", op, arg)
			}
			got[op] = mustJSON(v)
		default:
			got[op] = arg
		}
	}
	want["EXPOSE"] = strings.Join(ports, " ")
	for op, w := range want {
		if got[op] != w {
			report("final stage %s %q, want %q", op, got[op], w)
		}
	}
	if !regexp.MustCompile(`CGO_ENABLED=0 go build [^\n]*-X main\.version=`).Match(df) {
		report("the binary is not built static (CGO_ENABLED=0) and version-stamped")
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVer := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if goVer == nil || !bytes.Contains(df, []byte("ARG GO_VERSION="+string(goVer[1])+"\n")) {
		report("the Dockerfile's GO_VERSION is not go.mod's go %s", goVer)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
