package routes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/fencecheck"
)

// HostChoices lists the pairs of entries that govern some same path and
// method on different hosts with different options. Where the Host
// selects the backend (an ingress gateway's virtual hosts) that is a
// configuration; behind a sidecar, whose inbound listener takes any Host,
// it is a choice the client makes: it sends the Host of the weaker entry
// (the Service name, a pod IP, another name) to the same workload. So
// `fencegate routes check` warns of each pair and `fencegate routes
// istio` refuses such a table unless told the Host selects the workload.
// It compares every pair (commands only: Compile does not call it).
func HostChoices(t *Table) []string {
	if t == nil || !t.hosted {
		return nil
	}
	var out []string
	for i, a := range t.entries {
		for _, b := range t.entries[i+1:] {
			if slices.Equal(a.hosts, b.hosts) || !methodsOverlap(a.methods, b.methods) || !pathsOverlap(&a.path, &b.path) {
				continue
			}
			if why := optionsDiffer(a.Route, b.Route); why != "" {
				out = append(out, fmt.Sprintf("entries %q (%s) and %q (%s) govern the same paths and methods with different %s: "+
					"where the Host does not choose the workload (behind a sidecar), a client picks between them by its Host",
					a.Name, hostsString(a.hosts), b.Name, hostsString(b.hosts), why))
			}
		}
	}
	return out
}

func hostsString(h []string) string {
	if len(h) == 0 {
		return "every host"
	}
	return "hosts " + strings.Join(h, ",")
}

func methodsOverlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	return slices.ContainsFunc(a, func(m string) bool {
		return slices.ContainsFunc(b, func(n string) bool { return strings.EqualFold(m, n) })
	})
}

// pathsOverlap reports whether some decoded path matches both.
func pathsOverlap(a, b *pathMatch) bool {
	if a.typ == PathTemplate && b.typ == PathTemplate {
		return segsOverlap(a.segs, b.segs)
	}
	if a.typ == PathTemplate {
		a, b = b, a
	}
	if b.typ == PathTemplate { // a: Exact or PathPrefix
		var lits []string
		if a.p != "" {
			lits = strings.Split(a.p[1:], "/")
		}
		if len(lits) > len(b.segs) || (a.typ == PathExact && len(lits) != len(b.segs)) {
			return false
		}
		for j, l := range lits {
			s := b.segs[j]
			switch {
			case s.any:
				if l == "" {
					return false
				}
			case s.typ != "":
				if !fencecheck.SegmentIs(s.typ, l) {
					return false
				}
			case s.lit != l:
				return false
			}
		}
		return true
	}
	under := func(p, prefix string) bool { return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/") }
	switch {
	case a.typ == PathExact && b.typ == PathExact:
		return a.p == b.p
	case a.typ == PathExact:
		return under(a.p, b.p)
	case b.typ == PathExact:
		return under(b.p, a.p)
	}
	return under(a.p, b.p) || under(b.p, a.p)
}

// optionsDiffer names the options in which a and b differ, or "".
func optionsDiffer(a, b *fencecheck.Route) string {
	key := func(r *fencecheck.Route) string {
		if r.Key == nil {
			return "header " + r.KeyHeader
		}
		return r.Key.String()
	}
	var d []string
	for _, f := range []struct {
		name string
		x, y any
	}{
		{"policy", a.Policy, b.Policy}, {"mode", a.Mode, b.Mode}, {"proof", a.Proof, b.Proof},
		{"write methods", a.Methods.String(), b.Methods.String()}, {"key", key(a), key(b)},
		{"fence header", a.FenceHeader, b.FenceHeader}, {"barrier", a.Barrier, b.Barrier},
	} {
		if f.x != f.y {
			d = append(d, f.name)
		}
	}
	return strings.Join(d, ", ")
}
