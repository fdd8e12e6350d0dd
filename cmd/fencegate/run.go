package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// Exit codes of `fencegate lock run`, beyond the command's own status. They
// sit high so they are unlikely to be confused with a command's codes; 126,
// 127 and 128+N follow the shell's conventions.
const (
	exitRunBusy     = 120 // the lock stayed held by someone else for --wait
	exitRunLost     = 121 // the lock was lost while the command ran; it was killed
	exitRunFailure  = 125 // fencegate itself failed (usage, gateway, store)
	exitRunNoExec   = 126 // the command exists but could not be started
	exitRunNotFound = 127 // the command was not found
)

const runUsage = `usage: fencegate lock run --key K [--ttl 30s] [--wait 0s] [--grace 2s] -- CMD [ARGS...]

Runs CMD while holding the lock on K, the way 'etcdctl lock' and 'consul lock' do:
  - waits up to --wait for the lock (default: don't wait);
  - exports FENCE_KEY, FENCE_TOKEN (the fence), FENCE_LOCK_ID and FENCE_PROOF
    (the signed write proof; empty when the gateway has no proof keys) to CMD;
  - extends the lock in the background (at half the TTL);
  - if the lock is lost, sends CMD's process group SIGTERM, then SIGKILL after --grace;
  - forwards SIGINT/SIGTERM it receives to CMD;
  - releases the lock when CMD exits and returns CMD's exit status.

Exit codes: CMD's status; 120 lock held by another for --wait; 121 lock lost (CMD killed);
125 fencegate failed; 126 CMD not executable; 127 CMD not found; 128+N CMD killed by signal N.`

func runLockRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("lock run", runUsage)
	var cf clientFlags
	cf.register(fs)
	key := fs.String("key", "", "lock key (required)")
	ttl := fs.Duration("ttl", lockstore.DefaultTTL, "lock TTL; the lock is extended at half of it")
	wait := fs.Duration("wait", 0, "how long to wait for the lock if it is held")
	grace := fs.Duration("grace", 2*time.Second, "after the lock is lost, how long CMD has between SIGTERM and SIGKILL")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitRunFailure); !ok {
		return code
	}
	argv := fs.Args()
	if *key == "" || len(argv) == 0 {
		fmt.Fprintln(stderr, runUsage)
		return exitRunFailure
	}
	c, err := cf.client()
	if err != nil {
		fmt.Fprintln(stderr, "fencegate lock run:", err)
		return exitRunFailure
	}

	actx, cancel := context.WithTimeout(ctx, cf.timeout+*wait)
	r, sent, err := acquireWaiting(actx, c, *key, *ttl, *wait)
	cancel()
	switch {
	case errors.Is(err, errLockBusy):
		fmt.Fprintf(stderr, "fencegate lock run: %v (waited %s)\n", err, *wait)
		return exitRunBusy
	case err != nil:
		fmt.Fprintln(stderr, "fencegate lock run: acquire:", err)
		return exitRunFailure
	}
	held := lock.NewHeld(*key, r, sent, *ttl)
	release := func() {
		rctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
		defer cancel()
		if _, err := c.Release(rctx, held.LockID); err != nil {
			fmt.Fprintln(stderr, "fencegate lock run: release:", err, "(the lock expires by its TTL)")
		}
	}

	// The lease is not tied to ctx: a signal to us is forwarded to CMD, and
	// we keep the lock until CMD has exited.
	lease, err := lock.KeepAlive(context.Background(), c, held, *ttl)
	if err != nil {
		release()
		fmt.Fprintln(stderr, "fencegate lock run:", err)
		return exitRunFailure
	}
	defer lease.Stop()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "FENCE_KEY="+*key, "FENCE_TOKEN="+held.Fence, "FENCE_LOCK_ID="+held.LockID, "FENCE_PROOF="+held.Proof)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// Its own process group, so a lost lock stops CMD's children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lease.Stop()
		release()
		fmt.Fprintln(stderr, "fencegate lock run:", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitRunNotFound
		}
		return exitRunNoExec
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	signalGroup := func(sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) }
	// stop sends SIGTERM, then SIGKILL if CMD outlives the grace period.
	stop := func() error {
		signalGroup(syscall.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(*grace):
			signalGroup(syscall.SIGKILL)
			return <-done
		}
	}

	var waitErr error
	lost := false
	select {
	case waitErr = <-done:
	case <-lease.Done():
		lost = true
		fmt.Fprintf(stderr, "fencegate lock run: %v; stopping the command\n", context.Cause(lease.Context()))
		waitErr = stop()
	case <-ctx.Done():
		// SIGINT/SIGTERM reached us: pass it on and wait, still holding the lock.
		signalGroup(syscall.SIGTERM)
		select {
		case waitErr = <-done:
		case <-lease.Done():
			lost = true
			waitErr = stop()
		}
	}
	lease.Stop()
	release()

	if lost {
		return exitRunLost
	}
	return exitStatus(waitErr)
}

// exitStatus is the shell's view of how a command ended.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitRunFailure
}
