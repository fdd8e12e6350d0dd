// Package certwatch serves a TLS certificate and key from files and re-reads
// them when they change, so that a listener picks up a rotated certificate
// (cert-manager, a renewed Secret volume, a cron job) without a restart.
//
// The files are polled: every Interval the watcher reads them and compares a
// hash of their contents with the last one it saw. Polling is used rather than
// inotify because Kubernetes updates Secret volumes by swapping a symlink to a
// new directory, which inotify watchers on the file paths miss unless they
// watch the parent and re-arm; reading a few kilobytes every couple of seconds
// costs nothing and has no such corner cases.
//
// A pair that fails to load (missing file, key not matching the certificate,
// half-written rotation) is logged and ignored: the last good pair keeps being
// served until a valid one appears.
package certwatch

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultInterval is how often the files are polled when Options.Interval is
// zero. A Secret volume update already takes up to a minute to reach the pod,
// so a couple of seconds adds nothing noticeable.
const DefaultInterval = 2 * time.Second

// ErrNotReady is returned by the TLS hooks while no valid pair has been loaded.
var ErrNotReady = errors.New("certwatch: no valid certificate loaded yet")

// Options configure a Watcher. The zero value is usable.
type Options struct {
	// Logger receives reload and failure messages; nil means slog.Default().
	Logger *slog.Logger
	// Interval between polls; zero means DefaultInterval.
	Interval time.Duration
	// ClientCAFile, when set, is a PEM bundle of CAs that client certificates
	// must chain to (mTLS). It is re-read with the pair.
	ClientCAFile string
	// WaitForFiles makes New succeed even when the first load fails, so that
	// a process can start before its certificate is issued; Ready reports
	// false until a valid pair appears. Without it New returns the load error,
	// which is what a mistyped flag deserves.
	WaitForFiles bool
}

// Watcher holds the current certificate (and client CA pool) and refreshes
// them from disk. Its methods are safe for concurrent use.
type Watcher struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger
	interval                  time.Duration

	mu      sync.RWMutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	seen    [sha256.Size]byte // hash of the file contents last tried
	lastErr error             // why the contents last tried were unusable

	closeOnce sync.Once
	closed    chan struct{}
	runMu     sync.Mutex
	runs      []chan struct{} // one per Run call, closed when it returns
}

// New loads certFile and keyFile (and o.ClientCAFile) and returns a Watcher
// serving them. Call Run to keep them fresh.
func New(certFile, keyFile string, o Options) (*Watcher, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("certwatch: both a certificate file and a key file are required")
	}
	w := &Watcher{
		certFile: certFile,
		keyFile:  keyFile,
		caFile:   o.ClientCAFile,
		log:      o.Logger,
		interval: o.Interval,
		closed:   make(chan struct{}),
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.interval <= 0 {
		w.interval = DefaultInterval
	}
	if _, err := w.reload(); err != nil {
		if !o.WaitForFiles {
			return nil, err
		}
		w.log.Warn("certwatch: certificate not loaded yet; waiting for it", "cert", certFile, "err", err)
	}
	return w, nil
}

// Ready reports whether a valid certificate/key pair has been loaded.
func (w *Watcher) Ready() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.cert != nil
}

// Certificate returns the pair being served, or nil before the first load.
func (w *Watcher) Certificate() *tls.Certificate {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.cert
}

// ClientCAs returns the current client CA pool, or nil when none is configured
// or loaded.
func (w *Watcher) ClientCAs() *x509.CertPool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.pool
}

// GetCertificate is a tls.Config.GetCertificate hook serving the current pair.
func (w *Watcher) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := w.Certificate(); c != nil {
		return c, nil
	}
	return nil, ErrNotReady
}

// GetClientCertificate is a tls.Config.GetClientCertificate hook, for a client
// that presents the watched pair to its server.
func (w *Watcher) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := w.Certificate(); c != nil {
		return c, nil
	}
	return nil, ErrNotReady
}

// ServerConfig returns a copy of base (nil: a fresh config, TLS 1.2 minimum)
// whose certificate comes from the watcher. With a client CA file configured
// it also requires and verifies client certificates against the current pool;
// the pool is looked up per handshake, because tls.Config.ClientCAs is a plain
// field that would otherwise freeze the first one.
func (w *Watcher) ServerConfig(base *tls.Config) *tls.Config {
	var cfg *tls.Config
	if base != nil {
		cfg = base.Clone()
	} else {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	cfg.Certificates = nil
	cfg.GetCertificate = w.GetCertificate
	if w.caFile == "" {
		return cfg
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	tmpl := cfg.Clone()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool := w.ClientCAs()
		if pool == nil {
			return nil, ErrNotReady
		}
		c := tmpl.Clone()
		c.ClientCAs = pool
		return c, nil
	}
	return cfg
}

// Reload reads the files now. It reports whether a new pair was installed;
// an error means the files are unusable and the previous pair stays.
func (w *Watcher) Reload() (bool, error) {
	return w.reload()
}

// Run polls the files until ctx is done or Close is called. It returns nil
// on Close and ctx.Err() on cancellation.
func (w *Watcher) Run(ctx context.Context) error {
	w.runMu.Lock()
	select {
	case <-w.closed:
		w.runMu.Unlock()
		return nil
	default:
	}
	done := make(chan struct{})
	w.runs = append(w.runs, done)
	w.runMu.Unlock()
	defer close(done)

	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.closed:
			return nil
		case <-t.C:
			// Failures are logged inside reload; the old pair stays.
			_, _ = w.reload()
		}
	}
}

// Close stops Run and waits for it to return. It is idempotent. The last
// pair remains available to the hooks.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() { close(w.closed) })
	// A Run that registers after this point sees closed and returns at once.
	w.runMu.Lock()
	runs := w.runs
	w.runMu.Unlock()
	for _, done := range runs {
		<-done
	}
	return nil
}

// reload reads every file, and when their combined contents differ from the
// last attempt, parses and installs them.
func (w *Watcher) reload() (bool, error) {
	certPEM, err := os.ReadFile(w.certFile)
	if err != nil {
		return false, w.fail(fmt.Errorf("certwatch: read certificate: %w", err), nil)
	}
	keyPEM, err := os.ReadFile(w.keyFile)
	if err != nil {
		return false, w.fail(fmt.Errorf("certwatch: read key: %w", err), nil)
	}
	var caPEM []byte
	if w.caFile != "" {
		if caPEM, err = os.ReadFile(w.caFile); err != nil {
			return false, w.fail(fmt.Errorf("certwatch: read client CA: %w", err), nil)
		}
	}
	sum := digest(certPEM, keyPEM, caPEM)

	w.mu.RLock()
	unchanged, lastErr := sum == w.seen, w.lastErr
	w.mu.RUnlock()
	if unchanged {
		return false, lastErr
	}

	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, w.fail(fmt.Errorf("certwatch: load key pair %s: %w", w.certFile, err), &sum)
	}
	// X509KeyPair fills Leaf since Go 1.23; parse it ourselves if it did not,
	// because the validity window is worth checking and logging.
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return false, w.fail(fmt.Errorf("certwatch: parse certificate: %w", err), &sum)
		}
	}
	var pool *x509.CertPool
	if w.caFile != "" {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return false, w.fail(fmt.Errorf("certwatch: client CA file %s holds no PEM certificate", w.caFile), &sum)
		}
	}

	w.mu.Lock()
	w.cert, w.pool, w.seen, w.lastErr = &pair, pool, sum, nil
	w.mu.Unlock()

	now := time.Now()
	attrs := []any{"cert", w.certFile, "subject", pair.Leaf.Subject.String(), "notAfter", pair.Leaf.NotAfter}
	if now.After(pair.Leaf.NotAfter) || now.Before(pair.Leaf.NotBefore) {
		// Still installed: an expired certificate is the operator's to fix,
		// and refusing it would only turn a warning into an outage.
		w.log.Warn("certwatch: loaded certificate is outside its validity window", attrs...)
	} else {
		w.log.Info("certwatch: certificate loaded", attrs...)
	}
	return true, nil
}

// fail records err as the outcome of the contents hashed as sum (nil: a file
// could not be read, so any later contents count as new) and logs it unless it
// repeats the previous failure, so a broken file does not log on every poll.
func (w *Watcher) fail(err error, sum *[sha256.Size]byte) error {
	w.mu.Lock()
	repeat := w.lastErr != nil && w.lastErr.Error() == err.Error()
	w.lastErr = err
	if sum != nil {
		w.seen = *sum
	} else {
		w.seen = [sha256.Size]byte{}
	}
	serving := w.cert != nil
	w.mu.Unlock()
	if repeat {
		w.log.Debug("certwatch: reload failed", "err", err)
		return err
	}
	w.log.Warn("certwatch: reload failed; keeping the previous certificate", "err", err, "serving", serving)
	return err
}

// digest hashes the files with length prefixes so that moving bytes from one
// file to the next cannot produce the same sum.
func digest(parts ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		for i := range n {
			n[i] = byte(uint64(len(p)) >> (8 * i))
		}
		h.Write(n[:])
		h.Write(p)
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}
