package routes

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// randomTable is a table of n entries drawn from a small vocabulary, so
// that many pairs collide: the same path, paths one reading makes equal
// (case, trailing dots, compatibility forms), overlapping templates,
// hosts and methods that do or do not meet.
func randomTable(r *rand.Rand, n int) []config.Route {
	segs := []string{"orders", "Orders", "orders.", "ｏrders", "items", "a", "7", "42"}
	tseg := []string{"orders", "Orders", "items", "7", "*", "{int}", "{uuid}"}
	hosts := [][]string{nil, nil, {"api.example.com"}, {"api.example.com", "b.example.com"}, {"*.example.com"}}
	methods := [][]string{nil, nil, {"PUT"}, {"PUT", "POST"}, {"DELETE"}}
	out := make([]config.Route, 0, n)
	for i := range n {
		typ := []string{PathExact, PathPrefix, PathTemplate}[r.IntN(3)]
		var parts []string
		for range 1 + r.IntN(3) {
			if typ == PathTemplate {
				parts = append(parts, tseg[r.IntN(len(tseg))])
			} else {
				parts = append(parts, segs[r.IntN(len(segs))])
			}
		}
		out = append(out, entry(fmt.Sprintf("e%d", i), hosts[r.IntN(len(hosts))], typ, "/"+strings.Join(parts, "/"),
			methods[r.IntN(len(methods))]...))
	}
	return out
}

// TestOverlapGroupingFindsEveryPair: on random tables full of collisions,
// the grouped overlap check reports exactly what comparing every pair
// reports (the same problems, in the same order). The tables are checked
// to exercise every kind of overlap, readings included, so that a grouping
// that missed one (by the raw path only, say) would show here.
func TestOverlapGroupingFindsEveryPair(t *testing.T) {
	kinds := map[string]int{}
	for seed := range uint64(300) {
		tbl := randomTable(rand.New(rand.NewPCG(seed, 26)), 2+int(seed%40))
		var grouped, all int
		_, gerr := Compile(tbl, Options{comparisons: &grouped})
		_, aerr := Compile(tbl, Options{allPairs: true, comparisons: &all})
		if fmt.Sprint(gerr) != fmt.Sprint(aerr) {
			t.Fatalf("seed %d: grouped check:\n%v\nevery pair:\n%v", seed, gerr, aerr)
		}
		if grouped > all {
			t.Fatalf("seed %d: grouping compared %d pairs, more than all %d", seed, grouped, all)
		}
		if aerr != nil {
			for _, line := range strings.Split(aerr.Error(), "\n") {
				switch {
				case strings.Contains(line, "overlapping templates"):
					kinds["template"]++
				case strings.Contains(line, "templates that overlap to an upstream"):
					kinds["template, one reading"]++
				case strings.Contains(line, "the same hosts, path"):
					kinds["same path"]++
				case strings.Contains(line, "are one to an upstream"):
					kinds["path, one reading"]++
				}
			}
		}
	}
	for _, k := range []string{"template", "template, one reading", "same path", "path, one reading"} {
		if kinds[k] == 0 {
			t.Errorf("no random table had an overlap of kind %q: the comparison proves less than it says (%v)", k, kinds)
		}
	}
	t.Logf("overlaps found, by kind: %v", kinds)
}

// distinctTable is a table of n entries as a large real table has: exact
// paths, prefixes and templates under many top-level segments, each path
// twice, for two methods (a pair the check must compare).
func distinctTable(n int) []config.Route {
	out := make([]config.Route, 0, n)
	for j := range n {
		i, m := j/2, []string{"PUT", "DELETE"}[j%2]
		switch i % 4 {
		case 0:
			out = append(out, entry(fmt.Sprintf("x%d-%s", i, m), nil, PathExact, fmt.Sprintf("/svc%d/exact", i), m))
		case 1:
			out = append(out, entry(fmt.Sprintf("p%d-%s", i, m), []string{"api.example.com"}, PathPrefix, fmt.Sprintf("/svc%d", i), m))
		case 2:
			out = append(out, entry(fmt.Sprintf("t%d-%s", i, m), nil, PathTemplate, fmt.Sprintf("/svc%d/{int}", i), m))
		default:
			out = append(out, entry(fmt.Sprintf("w%d-%s", i, m), nil, PathTemplate, fmt.Sprintf("/svc%d/*/items/{uuid}", i), m))
		}
	}
	return out
}

// TestCompileComparisonsGrowLinearly: the overlap check's comparisons on
// tables of distinct paths grow with the table, not its square (counted,
// not timed). Comparing every pair (the broken variant, the check before
// issue #26 item 8) grows 16-fold from 250 to 1,000 entries: caught.
func TestCompileComparisonsGrowLinearly(t *testing.T) {
	for _, v := range []struct {
		name   string
		all    bool
		broken bool
	}{{"grouped", false, false}, {"broken: every pair", true, true}} {
		count := func(n int) int {
			c := 0
			if _, err := Compile(distinctTable(n), Options{allPairs: v.all, comparisons: &c}); err != nil {
				t.Fatal(err)
			}
			return c
		}
		small, large := count(250), count(1000)
		ratio := float64(large) / float64(max(small, 1))
		t.Logf("%s: %d comparisons at 250 entries, %d at 1,000 (×%.1f)", v.name, small, large, ratio)
		linear := large <= 4*1000 && ratio <= 6
		if linear == v.broken {
			t.Errorf("%s: linear=%v, want %v", v.name, linear, !v.broken)
		}
	}
}
