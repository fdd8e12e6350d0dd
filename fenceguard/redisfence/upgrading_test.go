package redisfence_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fenceguard/redisfence"
)

// TestUpgradingSnippet runs the redis-cli line docs/upgrading.md gives for
// moving old fences, as printed (with the test Redis's address), from the
// repository's root.
func TestUpgradingSnippet(t *testing.T) {
	rdb := client(t)
	ctx := context.Background()
	doc, err := os.ReadFile("../../docs/upgrading.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`(redis-cli --eval fenceguard/redisfence/migrate\\.lua '([^']+):fence' '([^']+)')`").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/upgrading.md has no redis-cli --eval migrate.lua line")
	}
	key, fk := string(m[2]), string(m[3])
	if fk != redisfence.FenceKey(key) {
		t.Fatalf("the doc's fence key %q is not FenceKey(%q)", fk, key)
	}
	rdb.Del(ctx, key+":fence", fk)
	t.Cleanup(func() { rdb.Del(context.Background(), key+":fence", fk) })
	rdb.Set(ctx, key+":fence", "000000000000012", 0)
	u, err := url.Parse(os.Getenv("REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(strings.ReplaceAll(string(m[1]), "'", ""))
	cmd := exec.Command(args[0], append([]string{"-h", u.Hostname(), "-p", u.Port()}, args[1:]...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	if got, _ := rdb.Get(ctx, fk).Result(); got != "000000000000012" {
		t.Errorf("after the doc's line the new fence key holds %q (%s)", got, out)
	}
}
