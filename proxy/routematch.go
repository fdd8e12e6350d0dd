package proxy

import (
	"strings"

	"github.com/fencegate/fencegate/routes"
)

// The proxy matches each path under every reading routes.Fold knows (an
// upstream framework may route case-insensitively, trim trailing dots,
// decode twice or fold compatibility forms) and refuses a path any reading
// routes elsewhere; see routes/fold.go.

var (
	readings  = routes.Readings
	folded    = routes.Fold
	foldName  = routes.ReadingName
	plainPath = routes.PlainPath
)

// matchFolded returns the route reading i selects for a path read that way:
// the longest folded prefix that matches.
func (p *Proxy) matchFolded(i int, fp string) *route {
	var best *route
	for _, r := range p.routes {
		pfx := r.folded[i]
		if pfx == "" || fp == pfx || strings.HasPrefix(fp, pfx+"/") {
			if best == nil || len(pfx) > len(best.folded[i]) {
				best = r
			}
		}
	}
	return best
}

// ambiguousRoute returns the name of a reading under which path selects
// another route than exact, or "" when every reading agrees.
func (p *Proxy) ambiguousRoute(decoded string, exact *route) string {
	if p.foldInvariant && plainPath(decoded) {
		// No reading changes such a path (CheckPath has already refused
		// "//" and dot segments), nor any prefix: the exact match stands.
		return ""
	}
	for i := 0; i < readings; i++ {
		if p.matchFolded(i, folded(i, decoded)) != exact {
			return foldName(i)
		}
	}
	return ""
}
