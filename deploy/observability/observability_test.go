// Package observability holds fencegate's Prometheus alert rules
// (alerts.yaml, unit-tested in alerts_test.yaml), its Grafana dashboard
// (dashboard.json) and the alerts' runbook (RUNBOOK.md). The tests check the
// rules with a real promtool (built by build-promtool.sh), and check every
// metric the rules and the dashboard name against a live /metrics of the
// real binary.
package observability

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/cmd/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/internal/certwatch/certtest"
	"github.com/fencegate/fencegate/internal/testutil"
	"gopkg.in/yaml.v3"
)

// promtoolVersion is the module version build-promtool.sh builds; keep them
// in step (TestPromtoolVersionMatchesBuildScript).
const promtoolVersion = "v0.316.0"

// notYetExported are metrics the rules and dashboard may use before the
// binary exports them (none today).
// TestRulesAndDashboardUseExportedMetrics fails for an entry the binary
// does export, so a stale one cannot linger.
var notYetExported = map[string]string{}

// promtool returns the path of the promtool build-promtool.sh built, or
// fails naming the command that builds it.
func promtool(t *testing.T) string {
	t.Helper()
	testutil.NeedService(t, "promtool (make promtool)")
	dir := os.Getenv("FENCEGATE_CACHE")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("locate the promtool cache: %v", err)
		}
		dir = filepath.Join(home, ".cache", "fencegate")
	}
	p := filepath.Join(dir, "promtool", promtoolVersion, "promtool")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s is missing: run `make promtool` (bash deploy/observability/build-promtool.sh) first; `make test` does", p)
	}
	return p
}

// runPromtool runs promtool with args in dir and returns its combined
// output and whether it exited 0.
func runPromtool(t *testing.T, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("promtool %v: %v", args, err)
		}
		return string(out), false
	}
	return string(out), true
}

func TestPromtoolVersionMatchesBuildScript(t *testing.T) {
	b, err := os.ReadFile("build-promtool.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PROMTOOL_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != promtoolVersion {
		t.Fatalf("build-promtool.sh builds %q, the test looks for %q", m, promtoolVersion)
	}
}

func TestAlertRulesCheck(t *testing.T) {
	if out, ok := runPromtool(t, ".", "check", "rules", "alerts.yaml"); !ok {
		t.Fatalf("promtool check rules alerts.yaml:\n%s", out)
	}
}

func TestAlertRulesUnitTests(t *testing.T) {
	if out, ok := runPromtool(t, ".", "test", "rules", "alerts_test.yaml"); !ok {
		t.Fatalf("promtool test rules alerts_test.yaml:\n%s", out)
	}
}

// TestAlertUnitTestsCatchBrokenRules runs the unit tests against broken
// copies of the rules: each must fail them.
func TestAlertUnitTestsCatchBrokenRules(t *testing.T) {
	rules, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, old, new string }{
		{"fail-closed threshold raised to 50%", "> 0.01", "> 0.5"},
		{"fail-closed counts stale denials", `reason="unavailable"}[5m]))`, `reason="stale"}[5m]))`},
		{"fail-closed counts dry-run's would-deny", `decision="deny", reason="unavailable"}[5m]))`, `reason="unavailable"}[5m]))`},
		{"audit drops of one reason only", "increase(fencegate_audit_dropped_total[10m])", `increase(fencegate_audit_dropped_total{reason="write-failed"}[10m])`},
		{"store readiness without a for", "        for: 2m\n", ""},
		{"fence warnings over an hour", "fencegate_fence_warnings_total[1d]", "fencegate_fence_warnings_total[1h]"},
		{"certificate warning at 1 day", "< 14 * 86400", "< 1 * 86400"},
		{"draining without the open-writes condition", "sum by (job) (fencegate_barrier_inflight_writes) > 0", "sum by (job) (fencegate_barrier_inflight_writes) >= 0"},
		{"draining alert too eager", "        for: 10m\n", "        for: 1m\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !bytes.Contains(rules, []byte(c.old)) {
				t.Fatalf("alerts.yaml no longer contains %q: update this case", c.old)
			}
			dir := t.TempDir()
			broken := bytes.Replace(rules, []byte(c.old), []byte(c.new), 1)
			if err := os.WriteFile(filepath.Join(dir, "alerts.yaml"), broken, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, ok := runPromtool(t, dir, "test", "rules", "alerts_test.yaml"); ok {
				t.Fatalf("the unit tests pass against the broken rules:\n%s", out)
			}
		})
	}
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	return rf
}

// wantAlerts are the alerts issue #14 asks for; each must exist, carry a
// severity and a runbook link, and be exercised by alerts_test.yaml.
var wantAlerts = []string{
	"FencegateFailingClosed", "FencegateAuditDropped", "FencegateStoreNotReady",
	"FencegateFenceNearOverflow", "FencegateCertificateExpiring", "FencegateDrainingWritesStuck",
}

const runbookURL = "https://github.com/fencegate/fencegate/blob/main/deploy/observability/RUNBOOK.md#"

func TestEveryAlertHasSeverityRunbookAndUnitTest(t *testing.T) {
	rf := readRules(t)
	unit, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := markdownAnchors(string(runbook))
	var seen []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			seen = append(seen, r.Alert)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
			if err := checkRunbookURL(r.Annotations["runbook_url"], anchors); err != nil {
				t.Errorf("%s: %v", r.Alert, err)
			}
			if !bytes.Contains(unit, []byte("alertname: "+r.Alert+"\n")) {
				t.Errorf("%s: no case in alerts_test.yaml", r.Alert)
			}
		}
	}
	for _, a := range wantAlerts {
		if !slices.Contains(seen, a) {
			t.Errorf("alert %s is missing from alerts.yaml", a)
		}
	}

	// The check itself catches a link to a section that does not exist.
	if err := checkRunbookURL(runbookURL+"fencegatenosuchalert", anchors); err == nil {
		t.Error("checkRunbookURL accepted an anchor RUNBOOK.md does not have")
	}
	if err := checkRunbookURL("https://example.com/runbook#fencegatefailingclosed", anchors); err == nil {
		t.Error("checkRunbookURL accepted a link outside the repository's RUNBOOK.md")
	}
}

func checkRunbookURL(u string, anchors []string) error {
	anchor, ok := strings.CutPrefix(u, runbookURL)
	if !ok {
		return fmt.Errorf("runbook_url %q does not point into %s", u, strings.TrimSuffix(runbookURL, "#"))
	}
	if !slices.Contains(anchors, anchor) {
		return fmt.Errorf("runbook_url anchor #%s is not a heading of RUNBOOK.md (have %v)", anchor, anchors)
	}
	return nil
}

// markdownAnchors returns the anchors GitHub gives the headings of md:
// lower-cased, punctuation but '-' and '_' dropped, spaces to '-'.
func markdownAnchors(md string) []string {
	var out []string
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// dashboardQueries returns every PromQL expression in a Grafana dashboard:
// panel targets (rows' nested panels included) and the query of each
// template variable (the series selector inside label_values(...)).
func dashboardQueries(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %d has no expr", p.Title, i)
					continue
				}
				out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[A-Za-z_]\w*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // the older plain-string form
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(<selector>, <label>)", v.Name, q.Query)
			continue
		}
		out["variable "+v.Name] = m[1]
	}
	return out
}

// checkSyntax has promtool parse every expression, as recording rules of a
// generated rule file: dependency-free, and the parser Prometheus runs.
func checkSyntax(t *testing.T, exprs map[string]string) error {
	t.Helper()
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	var where []string
	for w := range exprs {
		where = append(where, w)
	}
	slices.Sort(where)
	for i, w := range where {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: grafanaIntervals.Replace(exprs[w])})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := runPromtool(t, dir, "check", "rules", "dashboard-rules.yaml"); !ok {
		var list strings.Builder
		for i, w := range where {
			fmt.Fprintf(&list, "  dashboard:query_%d = %s\n", i, w)
		}
		return fmt.Errorf("a dashboard query does not parse:\n%s\nqueries:\n%s", out, list.String())
	}
	return nil
}

// usedMetrics maps each metric name the expressions select to where.
func usedMetrics(t *testing.T, exprs map[string]string) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	for w, e := range exprs {
		names, err := metricNames(grafanaIntervals.Replace(e))
		if err != nil {
			t.Errorf("%s: %v", w, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s selects no metric: %q", w, e)
		}
		for _, n := range names {
			used[n] = append(used[n], w)
		}
	}
	return used
}

// missingMetrics returns the used metrics that are neither exported nor
// allowed to be absent, sorted, each with where it is used.
func missingMetrics(used map[string][]string, exported map[string]bool) []string {
	var out []string
	for n, where := range used {
		if exported[n] {
			continue
		}
		if _, ok := notYetExported[n]; ok {
			continue
		}
		slices.Sort(where)
		out = append(out, fmt.Sprintf("%s (used by %s)", n, strings.Join(where, "; ")))
	}
	slices.Sort(out)
	return out
}

func ruleQueries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range readRules(t).Groups {
		for i, r := range g.Rules {
			out[fmt.Sprintf("alert %s (rule %d)", r.Alert, i)] = r.Expr
		}
	}
	return out
}

// TestDashboardImports checks what Grafana needs to import the dashboard
// into any instance: a fixed uid, unique panel ids, panels inside the
// 24-column grid, and every query on the data-source variable rather than
// a data source of the machine it was drawn on.
func TestDashboardImports(t *testing.T) {
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type ds struct {
		UID string `json:"uid"`
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID         int                      `json:"id"`
			Type       string                   `json:"type"`
			Title      string                   `json:"title"`
			Datasource *ds                      `json:"datasource"`
			GridPos    struct{ X, Y, W, H int } `json:"gridPos"`
			Targets    []struct {
				Datasource *ds `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard has no uid or title")
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q lies outside the 24-column grid: %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("a target of panel %q does not use the ${datasource} variable", p.Title)
			}
		}
	}
}

func TestDashboardQueriesParse(t *testing.T) {
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	q := dashboardQueries(t, raw)
	if len(q) < 10 {
		t.Fatalf("found only %d queries in dashboard.json", len(q))
	}
	if err := checkSyntax(t, q); err != nil {
		t.Fatal(err)
	}

	// The syntax check itself catches a broken query.
	broken := bytes.Replace(raw, []byte("sum by (decision, reason, mode) ("), []byte("sum by (decision, reason, mode) (("), 1)
	if bytes.Equal(broken, raw) {
		t.Fatal("the decisions panel changed: update this case")
	}
	if err := checkSyntax(t, dashboardQueries(t, broken)); err == nil {
		t.Fatal("checkSyntax accepted a query with an unbalanced parenthesis")
	}
}

// TestRulesAndDashboardUseExportedMetrics starts the real binary, exercises
// it so that metrics which only appear once used have series (an acquire,
// an allowed and a denied edge check, which writes an audit event, an
// admission review), scrapes /metrics and requires every metric the rules
// and the dashboard select to be there.
func TestRulesAndDashboardUseExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	exported := scrapeExercisedBinary(t)

	queries := dashboardQueries(t, raw)
	for w, e := range ruleQueries(t) {
		queries[w] = e
	}
	used := usedMetrics(t, queries)
	if missing := missingMetrics(used, exported); len(missing) > 0 {
		t.Errorf("not exported by the binary:\n  %s", strings.Join(missing, "\n  "))
	}
	for n, why := range notYetExported {
		if exported[n] {
			t.Errorf("%s is exported now: remove it from notYetExported (%s)", n, why)
		}
		if _, ok := used[n]; !ok {
			t.Errorf("%s is in notYetExported but nothing uses it", n)
		}
	}

	// The check catches a misspelled name, with or without the prefix.
	for _, bad := range []struct{ old, new string }{
		{"fencegate_authz_check_duration_seconds_bucket", "fencegate_authz_check_duration_second_bucket"},
		{"fencegate_store_ready{", "fencgate_store_ready{"},
		{"fencegate_lock_ops_total", "fencegate_lock_operations_total"},
	} {
		broken := bytes.ReplaceAll(raw, []byte(bad.old), []byte(bad.new))
		if bytes.Equal(broken, raw) {
			t.Fatalf("dashboard.json has no %q: update this case", bad.old)
		}
		missing := missingMetrics(usedMetrics(t, dashboardQueries(t, broken)), exported)
		name := strings.TrimSuffix(bad.new, "{")
		if !slices.ContainsFunc(missing, func(m string) bool { return strings.HasPrefix(m, name+" ") }) {
			t.Errorf("a dashboard using %s was not caught (missing: %v)", name, missing)
		}
	}
}

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`rate(a_total[5m])`, []string{"a_total"}},
		{`sum by (job, reason) (rate(a_total{reason="x", job=~"$job"}[5m])) / sum without (instance) (b)`, []string{"a_total", "b"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))`, []string{"h_bucket"}},
		{`x * on (job, instance) group_left (backend) group by (job, instance, backend) (y{a="}"})`, []string{"x", "y"}},
		{`min(c) - time() < 14 * 86400 and on(job) d > 0 or e unless f offset 5m`, []string{"c", "d", "e", "f"}},
		{"sum(rate(g[5m])) # comment naming h\n", []string{"g"}},
		{`topk(3, m) > bool 1e-3`, []string{"m"}},
		{`sum(increase(a:recorded:rate5m[1d]))`, []string{"a:recorded:rate5m"}},
	} {
		got, err := metricNames(c.expr)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %v, %v; want %v", c.expr, got, err, c.want)
		}
	}
	for _, bad := range []string{`{__name__="x"}`, `x / $scale`, `x{a="b"`, `sum("x)`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("metricNames(%q) succeeded", bad)
		}
	}
}

// scrapeExercisedBinary takes the fencegate binary (fencegatetest), starts it on a temp bolt store
// with every listener (the admission webhook on a test certificate),
// exercises it, and returns the sample names /metrics exports.
func scrapeExercisedBinary(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	bin, err := fencegatetest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fencegatetest.Cleanup)
	ca := certtest.NewCA(t, "webhook-ca")
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cert, key := ca.Server(t, "fencegate-webhook", "127.0.0.1").Write(t, tlsDir)
	g := startGateway(t, bin, "serve", "--store", "bolt://"+filepath.Join(dir, "fg.db"), "--log-format", "json",
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--authz-addr", "127.0.0.1:0",
		"--admission-addr", "127.0.0.1:0", "--admission-tls-cert", cert, "--admission-tls-key", key)

	hc := &http.Client{Timeout: 30 * time.Second}
	base := "http://" + g.http
	resp, err := hc.Post(base+"/v1/locks/acquire", "application/json", strings.NewReader(`{"key":"orders/1","ttlMs":60000}`))
	if err != nil {
		t.Fatal(err)
	}
	var acq struct{ Fence string }
	_ = json.NewDecoder(resp.Body).Decode(&acq)
	resp.Body.Close()
	if acq.Fence == "" {
		t.Fatalf("acquire answered %d without a fence", resp.StatusCode)
	}
	check := func(fence string, want int) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/authz/check", nil)
		req.Header.Set("X-Forwarded-Method", "POST")
		req.Header.Set("X-Forwarded-Uri", "/orders/1")
		req.Header.Set("X-Fence-Key", "orders/1")
		req.Header.Set("X-Fence-Token", fence)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("edge check with fence %s = %d %s, want %d", fence, resp.StatusCode, body, want)
		}
	}
	check(acq.Fence, http.StatusOK)
	check("999999999999999", http.StatusConflict) // never issued: a denial, audited

	webhook := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "default"}}
	review, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{"uid": "0b5bc9f6-8c1e-4f0e-9a55-4a1b0c1d2e3f", "operation": "CREATE",
			"kind":     map[string]any{"group": "", "version": "v1", "kind": "ConfigMap"},
			"resource": map[string]any{"group": "", "version": "v1", "resource": "configmaps"},
			"name":     "c", "namespace": "default", "userInfo": map[string]any{"username": "someone"}, "object": obj}})
	resp, err = webhook.Post("https://"+g.admission+"/admission/validate", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admission review answered %d", resp.StatusCode)
	}

	resp, err = hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics answered %d", resp.StatusCode)
	}
	exported := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		exported[name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// The exercise reached what it meant to: an allow and a denial.
	for _, want := range []string{"fencegate_authz_decisions_total", "fencegate_admission_reviews_total", "fencegate_tls_certificate_expiry_timestamp_seconds"} {
		if !exported[want] {
			t.Fatalf("the exercised binary does not export %s", want)
		}
	}
	return exported
}

type gateway struct {
	http, admission string
}

// startGateway runs the binary and waits for its "fencegate ready" line,
// which names the listeners' addresses. It is stopped when the test ends.
func startGateway(t *testing.T, bin string, args ...string) gateway {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "FENCEGATE_CONFIG=")
	var logs bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout = io.Discard
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(exited) }()
	ready := make(chan gateway, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			logs.Write(sc.Bytes())
			logs.WriteByte('\n')
			var line map[string]any
			if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(fmt.Sprint(line["msg"]), "fencegate ready") {
				h, _ := line["http"].(string)
				a, _ := line["admission"].(string)
				ready <- gateway{http: h, admission: a}
				sent = true
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		<-scanned
		if t.Failed() {
			t.Logf("fencegate log:\n%s", logs.String())
		}
	})
	select {
	case g := <-ready:
		if g.http == "" || g.admission == "" {
			t.Fatalf("the ready line names no HTTP or admission listener: %+v", g)
		}
		return g
	case <-exited:
		<-scanned
		t.Fatalf("fencegate exited before it was ready:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		t.Fatal("fencegate not ready after 60s")
	}
	return gateway{}
}
