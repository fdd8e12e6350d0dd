package fencemodel

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// Each step (spin -a, gcc, pan, spin -t) gets this long; the slowest, the
// correct model's search, takes a few seconds.
const stepTimeout = 3 * time.Minute

// The assertion text pan prints for each property and witness.
var assertion = map[string]string{
	"P1": "(f!=watch)",
	"P2": "(myf[me]>=maxAdm)",
	"P3": "( !(busy[0])||(myf[0]==myf[me]))",
	"P4": "(f>maxIss)",
	"W1": "!(lost)",
	"W2": "assertion violated 0",
	"W3": "assertion violated 0",
	"W4": "assertion violated 0",
}

func TestModel(t *testing.T) {
	spin, gcc := tools(t)
	cases := []struct {
		name    string
		defines []string // for spin -a (the model's macros)
		// want is "" when the search must be complete with no error, else
		// the property (or witness) whose assertion must fail.
		want string
	}{
		{name: "correct", defines: nil},
		{name: "correct/two failovers, two clients", defines: []string{"-DNFAIL=2", "-DNC=2"}},
		{name: "correct/no skew, gap 2", defines: []string{"-DSKEW=0", "-DGAP=2"}},
		{name: "correct/expiry, no skew, gap 2", defines: []string{"-DEXPIRY", "-DSKEW=0", "-DGAP=2"}},

		{name: "NO_FLOOR", defines: []string{"-DNO_FLOOR", "-DCHECK=1"}, want: "P1"},
		{name: "BIG_SKEW", defines: []string{"-DBIG_SKEW", "-DCHECK=1"}, want: "P1"},
		{name: "no skew, gap 1", defines: []string{"-DSKEW=0", "-DGAP=1", "-DCHECK=1"}, want: "P1"},
		{name: "NO_LEAD_CAP", defines: []string{"-DNO_LEAD_CAP", "-DCHECK=1"}, want: "P1"},
		{name: "NO_LEAD_CAP/goes back", defines: []string{"-DNO_LEAD_CAP", "-DCHECK=4"}, want: "P4"},
		{name: "NO_BARRIER", defines: []string{"-DNO_BARRIER", "-DCHECK=3"}, want: "P3"},
		{name: "WINDOW", defines: []string{"-DWINDOW", "-DCHECK=2"}, want: "P2"},
		{name: "LOSE_ENTRIES", defines: []string{"-DLOSE_ENTRIES", "-DCHECK=3"}, want: "P3"},
		{name: "EXPIRY", defines: []string{"-DEXPIRY", "-DCHECK=3"}, want: "P3"},

		{name: "reach/admit after lossy failover", defines: []string{"-DREACH=1"}, want: "W1"},
		{name: "reach/draining", defines: []string{"-DREACH=2"}, want: "W2"},
		{name: "reach/lead cap refuses", defines: []string{"-DREACH=3"}, want: "W3"},
		{name: "reach/an entry expires", defines: []string{"-DEXPIRY", "-DSKEW=0", "-DGAP=2", "-DREACH=4"}, want: "W4"},
	}
	model, err := os.ReadFile("fence.pml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "fence.pml"), model, 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, dir, spin, append(append([]string{"-a"}, tc.defines...), "fence.pml")...)
			// Exhaustive search (no bitstate, no hash compaction): -DSAFETY
			// drops the cycle machinery, the properties are assertions.
			// A failing variant is searched breadth-first, for the
			// shortest counterexample, and compiled without optimisation:
			// its search is small, the compile is most of its time.
			cflags := []string{"-O2", "-w", "-DSAFETY"}
			if tc.want != "" {
				cflags = []string{"-O0", "-w", "-DSAFETY", "-DBFS"}
			}
			run(t, dir, gcc, append(cflags, "-o", "pan", "pan.c")...)
			out := run(t, dir, "./pan", "-m10000")
			res := parsePan(t, out)
			t.Logf("spin %s: errors %d, %d states stored, depth %d, %s s", strings.Join(tc.defines, " "), res.errors, res.stored, res.depth, res.elapsed)

			if tc.want == "" {
				if res.errors != 0 {
					t.Errorf("the model fails:\n%s\ntrail:\n%s", out, trail(t, dir, spin, tc.defines))
				}
				for _, bad := range []string{"Search not completed", "max search depth too small", "out of memory", "memory exhausted"} {
					if strings.Contains(out, bad) {
						t.Errorf("the search is not complete (%q):\n%s", bad, out)
					}
				}
				if !strings.Contains(out, "Full statespace search") {
					t.Errorf("pan did not report a full state-space search:\n%s", out)
				}
				return
			}
			if res.errors < 1 {
				t.Fatalf("the checker found no violation in variant %s:\n%s", tc.name, out)
			}
			if !strings.Contains(out, assertion[tc.want]) {
				t.Errorf("variant %s broke another assertion than %s's (%s):\n%s", tc.name, tc.want, assertion[tc.want], out)
			}
			t.Logf("counterexample:\n%s", trail(t, dir, spin, tc.defines))
		})
	}
}

// tools returns spin and gcc, failing (never skipping) when one is missing.
func tools(t *testing.T) (spin, gcc string) {
	t.Helper()
	spin = testutil.LookPath(t, "spin", "this test model-checks fence.pml with it; install it (apt-get install spin; .ci/run does)")
	gcc = testutil.LookPath(t, "gcc", "spin's verifier is C; install it (apt-get install gcc libc6-dev; .ci/run does)")
	return spin, gcc
}

// run runs name with args in dir and returns its combined output. A
// non-zero exit fails the test, except for pan, whose exit status is not
// its verdict (parsePan reads that).
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no answer within %s:\n%s", name, strings.Join(args, " "), stepTimeout, out)
	}
	if err != nil && name != "./pan" {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

type panResult struct {
	errors, stored, depth int
	elapsed               string
}

var (
	reErrors  = regexp.MustCompile(`depth reached (\d+), errors: (\d+)`)
	reStored  = regexp.MustCompile(`(\d+) states, stored`)
	reElapsed = regexp.MustCompile(`elapsed time ([0-9.e+-]+) seconds`)
)

// parsePan reads pan's summary; output without one fails the test.
func parsePan(t *testing.T, out string) panResult {
	t.Helper()
	var r panResult
	m := reErrors.FindStringSubmatch(out)
	s := reStored.FindStringSubmatch(out)
	e := reElapsed.FindStringSubmatch(out)
	if m == nil || s == nil || e == nil {
		t.Fatalf("pan printed no summary:\n%s", out)
	}
	r.depth, _ = strconv.Atoi(m[1])
	r.errors, _ = strconv.Atoi(m[2])
	r.stored, _ = strconv.Atoi(s[1])
	r.elapsed = e[1]
	return r
}

// trail replays pan's counterexample and returns the model's own lines
// (acquires, admissions, finishes, failovers) and the failed assertion.
func trail(t *testing.T, dir, spin string, defines []string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "fence.pml.trail")); err != nil {
		return "(no trail)"
	}
	out := run(t, dir, spin, append(append([]string{"-t"}, defines...), "fence.pml")...)
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "MSC: "):
			b.WriteString("  " + strings.TrimPrefix(line, "MSC: ") + "\n")
		case strings.Contains(line, "assertion violated"), strings.Contains(line, "text of failed assertion"):
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}
