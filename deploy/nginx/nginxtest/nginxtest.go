// Package nginxtest runs the real nginx binary with fencegate's shipped
// nginx.conf, its addresses replaced by a test's own, for tests in any
// package (deploy/nginx, e2e).
package nginxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// The addresses the shipped config names, replaced by the test's own.
const (
	shippedListen    = "listen 127.0.0.1:10080;"
	shippedFencegate = "server 127.0.0.1:8080;"
	shippedApp       = "server 127.0.0.1:3000;"
	// shippedCredential is the forward-auth credential line, empty as shipped.
	shippedCredential = `proxy_set_header Proxy-Authorization   "";`
)

// ConfigPath is the shipped deploy/nginx/nginx.conf.
func ConfigPath() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(self)), "nginx.conf")
}

// Start runs nginx with the shipped config in front of fencegateAddr (its
// HTTP listener) and appAddr (the protected API), in a temp prefix, and
// returns nginx's base URL. nginx is stopped when the test ends. A missing
// nginx binary fails the test: it never skips.
func Start(t testing.TB, fencegateAddr, appAddr string) string {
	t.Helper()
	return StartWithCredential(t, fencegateAddr, appAddr, "")
}

// StartWithCredential is Start with the forward-auth credential the
// operator writes into the config ("Bearer <token>"; "" leaves the shipped
// empty value).
func StartWithCredential(t testing.TB, fencegateAddr, appAddr, credential string) string {
	t.Helper()
	return StartEdited(t, fencegateAddr, appAddr, credential, nil)
}

// StartEdited is StartWithCredential with the shipped config's text passed
// through edit first (nil: as shipped): a test's broken variant of it.
func StartEdited(t testing.TB, fencegateAddr, appAddr, credential string, edit func(string) string) string {
	t.Helper()
	testutil.NeedService(t, "nginx")
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			t.Fatalf("nginx binary not found on PATH (or /usr/sbin/nginx): %v; install nginx (apt-get install -y nginx; .ci/run does)", err)
		}
		bin = "/usr/sbin/nginx"
	}
	conf, err := os.ReadFile(ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	text := string(conf)
	if edit != nil {
		text = edit(text)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	prefix := t.TempDir()
	for from, to := range map[string]string{
		shippedListen:     "listen " + listen + ";",
		shippedFencegate:  "server " + fencegateAddr + ";",
		shippedApp:        "server " + appAddr + ";",
		shippedCredential: fmt.Sprintf("proxy_set_header Proxy-Authorization   %q;", credential),
		// Keep every file nginx writes inside the temp prefix.
		"http {": fmt.Sprintf("http {\n    access_log %[1]s/access.log;\n    client_body_temp_path %[1]s/body;\n"+
			"    proxy_temp_path %[1]s/proxy;\n    fastcgi_temp_path %[1]s/fastcgi;\n    uwsgi_temp_path %[1]s/uwsgi;\n"+
			"    scgi_temp_path %[1]s/scgi;\n", prefix),
	} {
		if strings.Count(text, from) != 1 {
			t.Fatalf("nginx.conf should contain %q exactly once; update nginxtest", from)
		}
		text = strings.Replace(text, from, to, 1)
	}
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	global := fmt.Sprintf("daemon off; master_process on; worker_processes 1; pid %s/nginx.pid; error_log %s/error.log warn;", prefix, prefix)
	if out, err := exec.Command(bin, "-t", "-p", prefix, "-c", confPath, "-g", global).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", confPath, "-g", global)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful; only the nginx we started
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(prefix, "error.log")); err == nil {
				t.Logf("nginx error.log:\n%s", b)
			}
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", listen)
		if err == nil {
			_ = c.Close()
			return "http://" + listen
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s: %v", listen, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
