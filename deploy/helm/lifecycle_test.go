package helm_test

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/helm"
	"github.com/fencegate/fencegate/internal/testutil"
)

// drainBound is the gateway's drain bound (cmd/fencegate shutdownTimeout):
// the chart's lifecycle.drainSeconds default must not be below it.
const drainBound = 20 * time.Second

// shutdownOf reads a rendered Deployment's shutdown: the preStop sleep,
// the shutdown delay the binary parses from its arguments (through
// config.Flags, as `fencegate serve` does) and the grace period.
func shutdownOf(t *testing.T, dep *appsv1.Deployment) (preStop, delay, grace time.Duration) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Exec != nil || c.Lifecycle.PreStop.HTTPGet != nil {
			t.Fatalf("preStop %+v: want the kubelet's sleep action (the image has no shell)", c.Lifecycle.PreStop)
		}
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %v", c.Args)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	build := config.Flags(fs)
	if err := fs.Parse(c.Args[1:]); err != nil {
		t.Fatalf("the binary refuses the chart's args %v: %v", c.Args, err)
	}
	// The config file is the ConfigMap's mount, not here: only the flags.
	if err := fs.Set("config", ""); err != nil {
		t.Fatal(err)
	}
	cfg, err := build(func(string) string { return "" })
	if err != nil {
		t.Fatalf("the binary refuses the chart's args %v: %v", c.Args, err)
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds")
	}
	return preStop, cfg.Shutdown.Delay.Std(), time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
}

// TestLifecycle: every variant's pods wait in a preStop sleep, then get
// SIGTERM with a shutdown delay the binary accepts, and their grace period
// covers the sleep, the delay and the drain, so the kubelet's SIGKILL never
// cuts a drain short. A grace period set below that is refused at render.
func TestLifecycle(t *testing.T) {
	testutil.NeedService(t, "helm (make helm-bin)")
	for name, args := range variants {
		t.Run(name, func(t *testing.T) {
			r := render(t, "fencegate", "fencegate", args...)
			dep := as[appsv1.Deployment](t, r, "Deployment/fencegate")
			preStop, delay, grace := shutdownOf(t, dep)
			if preStop != 5*time.Second || delay != 0 {
				t.Errorf("preStop %v, delay %v; want the defaults 5s, 0s", preStop, delay)
			}
			if grace < preStop+delay+drainBound {
				t.Errorf("grace %v < preStop %v + delay %v + drain %v", grace, preStop, delay, drainBound)
			}
		})
	}
	with := func(extra ...string) []string { return append(slices.Clone(required), extra...) }
	for _, tc := range []struct {
		name                  string
		args                  []string
		preStop, delay, grace time.Duration
	}{
		{"delay", with("--set", "lifecycle.shutdownDelaySeconds=10"), 5 * time.Second, 10 * time.Second, 40 * time.Second},
		{"no preStop", with("--set", "lifecycle.preStopSleepSeconds=0"), 0, 0, 25 * time.Second},
		{"longer drain", with("--set", "lifecycle.drainSeconds=65"), 5 * time.Second, 0, 75 * time.Second},
		{"own grace", with("--set", "lifecycle.terminationGracePeriodSeconds=120"), 5 * time.Second, 0, 120 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dep := as[appsv1.Deployment](t, render(t, "fencegate", "fencegate", tc.args...), "Deployment/fencegate")
			preStop, delay, grace := shutdownOf(t, dep)
			if preStop != tc.preStop || delay != tc.delay || grace != tc.grace {
				t.Errorf("preStop %v, delay %v, grace %v; want %v, %v, %v", preStop, delay, grace, tc.preStop, tc.delay, tc.grace)
			}
			if tc.preStop == 0 && dep.Spec.Template.Spec.Containers[0].Lifecycle != nil {
				t.Errorf("lifecycle %+v without a preStop sleep", dep.Spec.Template.Spec.Containers[0].Lifecycle)
			}
		})
	}
	for _, bad := range [][]string{
		with("--set", "lifecycle.terminationGracePeriodSeconds=20"), // < 5 + 0 + 20
		with("--set", "lifecycle.shutdownDelaySeconds=-1"),
		with("--set", "lifecycle.preStopSleepSeconds=1h"),
	} {
		if _, err := helm.Template(context.Background(), "fencegate", "fencegate", bad...); err == nil {
			t.Errorf("%v rendered", bad[len(bad)-1])
		} else if !strings.Contains(err.Error(), "lifecycle") {
			t.Errorf("%v: %v, want an error naming lifecycle", bad[len(bad)-1], err)
		}
	}
}
