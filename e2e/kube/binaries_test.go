package kube_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/fencegate/fencegate/e2e/kube"
)

// build.sh and the Go side must agree on what is built, or the test looks
// for binaries build.sh never makes.
func TestBuildScriptVersionsMatch(t *testing.T) {
	script, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"KUBE_VERSION": kube.KubeVersion, "ETCD_VERSION": kube.EtcdVersion} {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(script)
		if m == nil || string(m[1]) != want {
			t.Errorf("build.sh sets %s=%s, binaries.go says %s", name, m, want)
		}
	}
}

func TestMissingBinariesNameBuildScript(t *testing.T) {
	t.Setenv("FENCEGATE_CACHE", t.TempDir())
	_, _, err := kube.Binaries()
	if err == nil {
		t.Fatal("Binaries found binaries in an empty cache")
	}
	if !regexp.MustCompile(`e2e/kube/build\.sh`).MatchString(err.Error()) {
		t.Fatalf("error %q does not name build.sh", err)
	}
}
