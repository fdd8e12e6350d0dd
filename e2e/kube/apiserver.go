package kube

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/certwatch/certtest"
)

// User is an identity the API server authenticates by static bearer token
// (--token-auth-file): its name and comma-separated groups.
type User struct{ Name, Groups string }

// APIServer is a running etcd + kube-apiserver on loopback, owned by a
// test: both processes stop at its cleanup.
type APIServer struct {
	URL    string            // https://127.0.0.1:PORT
	Tokens map[string]string // user name → bearer token
	Client *http.Client      // trusts the API server's CA
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// logTail keeps the last bytes a process wrote, for failure messages.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - 64<<10; over > 0 {
		l.buf = l.buf[over:]
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// startProcess runs a process owned by the test: it is stopped (SIGTERM,
// then SIGKILL) at cleanup, and its output is shown if the test failed.
func startProcess(t testing.TB, name, bin string, args ...string) *logTail {
	t.Helper()
	out := &logTail{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Webhooks are on loopback: never route them through a proxy.
	cmd.Env = append(os.Environ(), "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("--- %s output (tail) ---\n%s", name, out.String())
		}
	})
	return out
}

// Start starts etcd and kube-apiserver (the binaries build.sh caches; the
// test fails, never skips, when they are missing) with the flags envtest
// uses (service CIDR, service-account keys, a serving certificate), static
// token authentication for users and AlwaysAllow authorization, and waits
// until the API server is ready. Give at least one user in the group
// system:masters to install CRDs.
func Start(t testing.TB, users []User) *APIServer {
	t.Helper()
	apiserverBin, etcdBin, err := Binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	etcdClient, etcdPeer := FreePort(t), FreePort(t)
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	startProcess(t, "etcd", etcdBin,
		"--name=e2e",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL,
		"--unsafe-no-fsync", // a throwaway cluster: durability buys nothing
		"--log-level=warn",
	)

	ca := certtest.NewCA(t, "kube-apiserver e2e CA")
	serving := ca.Server(t, "kube-apiserver", "127.0.0.1", "localhost")
	certFile, keyFile := serving.Write(t, dir)
	saKey := filepath.Join(dir, "sa.key")
	saPub := filepath.Join(dir, "sa.pub")
	writeServiceAccountKeys(t, saKey, saPub)

	tokens := map[string]string{}
	var csv strings.Builder
	for _, u := range users {
		tok := certtest.RandomToken(t)
		tokens[u.Name] = tok
		fmt.Fprintf(&csv, "%s,%s,%s,\"%s\"\n", tok, u.Name, u.Name, u.Groups)
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	port := FreePort(t)
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	logs := startProcess(t, "kube-apiserver", apiserverBin,
		"--etcd-servers="+clientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer="+url,
		"--service-account-key-file="+saPub,
		"--service-account-signing-key-file="+saKey,
		"--token-auth-file="+tokenFile,
		"--authorization-mode=AlwaysAllow",
		"--anonymous-auth=false",
		// Pods are not under test; ServiceAccount would insist on default
		// service accounts nobody creates here.
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false",
		"--v=0",
	)

	a := &APIServer{
		URL:    url,
		Tokens: tokens,
		Client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 16},
		},
	}
	var probeUser string
	if len(users) > 0 {
		probeUser = users[0].Name
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		status, body, _, err := a.Do(context.Background(), probeUser, http.MethodGet, "/readyz", nil, "")
		if err == nil && status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 120 s (last: %d %s %v)\n%s", status, body, err, logs.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	return a
}

func writeServiceAccountKeys(t testing.TB, keyFile, pubFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Do sends one request as user (its bearer token) and returns the status,
// body and response headers. A nil body sends none; contentType defaults
// to application/json.
func (a *APIServer) Do(ctx context.Context, user, method, path string, body []byte, contentType string) (int, []byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.Tokens[user])
	req.Header.Set("Accept", "application/json")
	if rd != nil {
		if contentType == "" {
			contentType = "application/json"
		}
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}
