// Command fencegate is the fencing gateway: it holds distributed locks and
// enforces their fences at the network edge.
//
//	fencegate serve    run the gateway (lock API, ext_authz, ext_proc, admission webhook)
//	fencegate proxy    run the fencing reverse proxy in front of an API
//	fencegate lock     acquire, release, extend, look up, or run a command under a lock
//	fencegate audit    list audit events (denials) from a gateway
//	fencegate routes   check the route table and which entry a request matches; print its Istio policy
//	fencegate check    ask a gateway whether a fence is current for a key
//	fencegate migrate  create the PostgreSQL schema
//	fencegate token    generate a bearer token and the hash for the config file
//	fencegate version  print the version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes shared by every subcommand (lock run adds its own; see run.go).
const (
	exitOK       = 0
	exitNo       = 1 // a domain "no": locked, not found, denied
	exitUsage    = 2
	exitFailure  = 3 // a system failure: gateway unreachable, store down, bad config
	exitCanceled = 130
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the gateway", runServe},
		{"proxy", "run the fencing reverse proxy (routes from the config file)", runProxy},
		{"lock", "acquire | release | extend | status | lookup | run | annotate (a Kubernetes object's fence annotations)", runLock},
		{"audit", "list audit events (denials) from a gateway", runAudit},
		{"controller", "reconcile FencePolicy objects (Kubernetes, Gateway API)", runController},
		{"routes", "check: validate the route table, show which entry a request matches | istio: print its Istio policy", runRoutes},
		{"check", "ask a gateway whether a fence is current for a key", runCheck},
		{"migrate", "create the PostgreSQL tables and indexes", runMigrate},
		{"token", "generate a bearer token and its config entry", runToken},
		{"proofkey", "generate a write-proof signing key and its config entry", runProofKey},
		{"version", "print the version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	if isHelp(args[0]) {
		usage(stdout) // asked for: the answer, on stdout
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "fencegate: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: fencegate <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'fencegate <command> -h' for a command's flags.")
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "usage: fencegate version")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	fmt.Fprintf(stdout, "fencegate %s\n", version)
	return exitOK
}
