package routereload

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/routes"
)

const (
	reloadTableOld = "routes:\n  - {name: old, match: {path: {value: /w}}, key: w}\n"
	reloadTableNew = "routes:\n  - {name: new, match: {path: {value: /w}}, key: w}\n"
)

// swapLink points the symlink link at target, atomically (as a ConfigMap
// update does).
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestReloadPastAFIFO (#26 item 8): the config symlink swapped to a FIFO
// and SIGHUP, then to a valid table and SIGHUP: the valid table applies
// within seconds. The broken variant (the reloader reading in its own
// goroutine, unbounded, as before) hangs on the FIFO: the new table is
// still not served 6 s later, caught.
func TestReloadPastAFIFO(t *testing.T) {
	for _, broken := range []bool{false, true} {
		name := "bounded read"
		if broken {
			name = "broken: blocking read"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			oldPath, newPath, fifo := filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml"), filepath.Join(dir, "fifo")
			for p, body := range map[string]string{oldPath: reloadTableOld, newPath: reloadTableNew} {
				if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(dir, "config.yaml")
			swapLink(t, oldPath, link)
			loaded, err := ReadConfig(link)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := Compile(&loaded.Config)
			if err != nil {
				t.Fatal(err)
			}
			h := routes.NewHolder(tbl)
			hup := make(chan os.Signal, 4)
			reloadBlocking = broken
			defer func() { reloadBlocking = false }()
			r := New(loaded, hup, h, prometheus.NewRegistry(), discardLogger())
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); r.Run(ctx) }()
			defer func() {
				cancel()
				// Unblock a read hanging on the FIFO: a writer that
				// opens and closes it ends the read with EOF.
				if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					_ = f.Close()
				}
				<-done
			}()

			swapLink(t, fifo, link)
			hup <- syscall.SIGHUP
			time.Sleep(100 * time.Millisecond)
			swapLink(t, newPath, link)
			hup <- syscall.SIGHUP
			applied := false
			for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if h.Load().Named("new") != nil {
					applied = true
					break
				}
			}
			switch {
			case !broken && !applied:
				t.Fatal("the valid table did not apply within 6 s of its SIGHUP, after a FIFO")
			case broken && applied:
				t.Fatal("the blocking reader applied the new table: the test cannot tell it apart")
			}
		})
	}
}

// TestReloadReadGivenUp: a read that hangs (a hung filesystem) is given
// up after reloadReadTimeout and reported as a failed reload; the next
// read, once the file reads again, applies; and no more than
// maxStuckReads reads are left hanging.
func TestReloadReadGivenUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(reloadTableOld), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := Compile(&loaded.Config)
	h := routes.NewHolder(tbl)
	r := New(loaded, nil, h, prometheus.NewRegistry(), discardLogger())

	hang := make(chan struct{})
	defer close(hang)
	reloadReadTimeout = 200 * time.Millisecond
	readConfigBytes = func(string) ([]byte, error) { <-hang; return nil, errors.New("released") }
	defer func() { reloadReadTimeout, readConfigBytes = 5*time.Second, config.ReadFile }()
	for i := range maxStuckReads + 2 {
		start := time.Now()
		_, _, err := r.load()
		if err == nil || time.Since(start) > 2*time.Second {
			t.Fatalf("read %d of a hanging file: %v after %v", i, err, time.Since(start))
		}
		if i >= maxStuckReads && !strings.Contains(err.Error(), "still have not returned") {
			t.Fatalf("read %d: %v, want no new read past %d hanging ones", i, err, maxStuckReads)
		}
	}
	if n := r.stuck.Load(); n != maxStuckReads {
		t.Fatalf("%d reads hanging, want %d", n, maxStuckReads)
	}
	readConfigBytes = config.ReadFile
	if err := os.WriteFile(path, []byte(reloadTableNew), 0o600); err != nil {
		t.Fatal(err)
	}
	// The hanging reads still count: until one returns, none starts.
	r.reload("test")
	if h.Load().Named("new") != nil {
		t.Fatal("read past the cap of hanging reads")
	}
	hang <- struct{}{}
	for r.stuck.Load() >= maxStuckReads {
		time.Sleep(5 * time.Millisecond)
	}
	r.reload("test")
	if h.Load().Named("new") == nil {
		t.Fatal("the readable file did not apply once a hanging read returned")
	}
}

// TestConfigReadBounds: the config file is refused, without blocking,
// when it is not a regular file, and when it is over config.MaxFileSize.
func TestConfigReadBounds(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", config.MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(dir, "at.yaml")
	if err := os.WriteFile(at, []byte("#"+strings.Repeat("x", config.MaxFileSize-2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{{fifo, config.ErrNotRegular}, {dir, config.ErrNotRegular}, {big, config.ErrTooLarge}, {at, nil}} {
		_, err := ReadConfig(tc.path)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", filepath.Base(tc.path), err, tc.want)
		}
	}
}
