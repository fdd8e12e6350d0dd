package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/cmd/fencegate/fencegatetest"
)

// cliResult is one run of the binary.
type cliResult struct {
	code           int
	stdout, stderr string
}

func runBinary(t *testing.T, bin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cliResult{code, out.String(), errOut.String()}
}

// cliCase is one command: its help must list own (its flags) and none of
// notOwn (flags of its siblings); a bad flag exits bad.
type cliCase struct {
	args   []string
	own    []string
	notOwn []string
	bad    int
}

func cliCases() []cliCase {
	client := []string{"-server", "-token-file"}
	return []cliCase{
		{args: nil, own: []string{"serve", "routes", "istio", "lock", "annotate", "controller", "version"}, bad: exitUsage},
		{args: []string{"serve"}, own: []string{"-config", "-store"}, bad: exitUsage},
		{args: []string{"proxy"}, own: []string{"-config", "-listen", "-metrics-addr"}, bad: exitUsage},
		{args: []string{"lock"}, own: []string{"acquire", "release", "run", "annotate"}, bad: exitUsage},
		{args: []string{"lock", "acquire"}, own: append([]string{"-key", "-ttl", "-wait"}, client...), notOwn: []string{"-lock-id"}, bad: exitUsage},
		{args: []string{"lock", "release"}, own: append([]string{"-lock-id"}, client...), notOwn: []string{"-key", "-ttl", "-wait"}, bad: exitUsage},
		{args: []string{"lock", "extend"}, own: []string{"-lock-id", "-ttl"}, notOwn: []string{"-key", "-wait"}, bad: exitUsage},
		{args: []string{"lock", "status"}, own: []string{"-key"}, notOwn: []string{"-lock-id", "-ttl", "-wait"}, bad: exitUsage},
		{args: []string{"lock", "lookup"}, own: []string{"-key", "-lock-id"}, notOwn: []string{"-ttl", "-wait"}, bad: exitUsage},
		// lock run's codes other than 120-127 are CMD's own: a bad flag is
		// its "fencegate failed", 125, so that it never reads as CMD's 2.
		{args: []string{"lock", "run"}, own: []string{"-key", "-grace"}, bad: exitRunFailure},
		{args: []string{"lock", "annotate"}, own: []string{"-key", "-fence", "-patch"}, bad: exitUsage},
		{args: []string{"audit"}, own: []string{"-since", "-follow"}, bad: exitUsage},
		{args: []string{"routes"}, own: []string{"check", "istio"}, bad: exitUsage},
		{args: []string{"routes", "check"}, own: []string{"-config", "-request", "-header"}, bad: exitUsage},
		{args: []string{"routes", "istio"}, own: []string{"-config", "-namespace", "-selector"}, bad: exitUsage},
		{args: []string{"check"}, own: []string{"-key", "-fence", "-policy"}, bad: exitUsage},
		{args: []string{"migrate"}, own: []string{"-store"}, bad: exitUsage},
		{args: []string{"controller"}, own: []string{"-gateway", "-kube-url", "-configmap"}, bad: exitUsage},
		{args: []string{"token"}, own: []string{"-name", "-operations"}, bad: exitUsage},
		{args: []string{"proofkey"}, own: []string{"-kid", "-out"}, bad: exitUsage},
		{args: []string{"version"}, own: []string{"fencegate version"}, bad: exitUsage},
	}
}

// helpProblem says what is wrong with a command's answer to -h (or ""):
// the help goes to stdout, exit 0, nothing on stderr, and lists the
// command's own flags and no sibling's.
func helpProblem(c cliCase, r cliResult) string {
	switch {
	case r.code != exitOK:
		return fmt.Sprintf("exit %d, want 0", r.code)
	case r.stdout == "":
		return "no help on stdout"
	case r.stderr != "":
		return "stderr: " + r.stderr
	}
	for _, f := range c.own {
		if !strings.Contains(r.stdout, f) {
			return fmt.Sprintf("help lacks %s", f)
		}
	}
	for _, f := range c.notOwn {
		if strings.Contains(r.stdout, "  "+f+" ") || strings.Contains(r.stdout, "  "+f+"\n") {
			return fmt.Sprintf("help lists %s, which the command does not take", f)
		}
	}
	return ""
}

// badFlagProblem: a flag the command does not take exits c.bad with the
// error on stderr and nothing on stdout.
func badFlagProblem(c cliCase, r cliResult) string {
	switch {
	case r.code != c.bad:
		return fmt.Sprintf("exit %d, want %d", r.code, c.bad)
	case r.stdout != "":
		return "stdout: " + r.stdout
	case !strings.Contains(r.stderr, "bogus") && len(c.args) > 0:
		return "stderr does not name the flag: " + r.stderr
	}
	return ""
}

// TestCLIHelpAndBadFlags (#27 item 10): every subcommand, through the
// real binary, answers -h and --help on stdout with exit 0 and its own
// flags, and a bad flag with exit 2 (lock run: 125) on stderr. The
// checks are first run on the answers the commands gave before (help on
// stderr, -h exiting 2 or 125, release listing --ttl, version accepting
// --bogus) and must catch each.
func TestCLIHelpAndBadFlags(t *testing.T) {
	for _, b := range []struct {
		name    string
		c       cliCase
		r       cliResult
		help    bool
		problem string
	}{
		{"help on stderr", cliCase{args: nil}, cliResult{0, "", "usage: fencegate"}, true, "no help on stdout"},
		{"-h exits 2", cliCase{args: []string{"serve"}}, cliResult{2, "", "Usage of serve"}, true, "exit 2"},
		{"lock run -h exits 125", cliCase{args: []string{"lock", "run"}}, cliResult{125, "", "usage"}, true, "exit 125"},
		{"release lists --ttl", cliCase{args: []string{"lock", "release"}, own: []string{"-lock-id"}, notOwn: []string{"-ttl"}},
			cliResult{0, "  -lock-id string\n  -ttl duration\n", ""}, true, "-ttl"},
		{"version --bogus exits 0", cliCase{args: []string{"version"}, bad: exitUsage}, cliResult{0, "fencegate dev\n", ""}, false, "exit 0"},
	} {
		var got string
		if b.help {
			got = helpProblem(b.c, b.r)
		} else {
			got = badFlagProblem(b.c, b.r)
		}
		if !strings.Contains(got, b.problem) || got == "" {
			t.Fatalf("the check misses the old behaviour %q: %q", b.name, got)
		}
	}

	bin, err := fencegatetest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fencegatetest.Cleanup)
	for _, c := range cliCases() {
		name := strings.Join(append([]string{"fencegate"}, c.args...), " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each runs the binary three times; none shares state
			for _, h := range []string{"-h", "--help"} {
				if p := helpProblem(c, runBinary(t, bin, append(c.args, h)...)); p != "" {
					t.Errorf("%s %s: %s", name, h, p)
				}
			}
			if p := badFlagProblem(c, runBinary(t, bin, append(c.args, "--bogus")...)); p != "" {
				t.Errorf("%s --bogus: %s", name, p)
			}
		})
	}
	// No command at all is a usage error: the list, on stderr, exit 2.
	if r := runBinary(t, bin); r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "usage: fencegate") {
		t.Errorf("fencegate with no command: %+v", r)
	}
}
