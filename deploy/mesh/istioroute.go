package mesh

import (
	"strings"

	"github.com/fencegate/fencegate/config"
)

// IstioPaths are the Istio `paths` covering an entry's path match as an
// Istio ingress gateway's route matching reads it (exact, case-sensitive,
// after the gateway's own normalisation): an Exact path and its
// trailing-slash spelling, a PathPrefix and everything below it, a
// Template's literal prefix and everything below it (widened: true). For
// the FencePolicy controller's AuthorizationPolicy on a Gateway, where the
// request took the route by the same reading; the static table's sidecar
// policy (Istio) names no path at all, since a sidecar's workload is
// reached whatever the path's spelling. nil: every path.
func IstioPaths(p config.RoutePath) (paths []string, widened bool, err error) {
	segs, err := segments(p)
	if err != nil {
		return nil, false, err
	}
	if segs == nil {
		return nil, false, nil
	}
	switch {
	case p.Type == "Exact":
		return withSlash(p.Value), false, nil
	case p.Type == "Template" && hasVariable(segs):
		return []string{literalPrefix(segs) + "/*"}, true, nil
	case p.Type == "Template":
		// No variable: the template is one path.
		return withSlash(literalPrefix(segs)), false, nil
	default: // PathPrefix, segment-wise
		prefix := literalPrefix(segs)
		return []string{prefix, prefix + "/*"}, false, nil
	}
}

// withSlash is an exact path and the same path with a trailing "/", which
// fencegate's table matches as the same path and Istio, comparing exactly,
// would not send.
func withSlash(p string) []string {
	if p == "/" {
		return []string{p}
	}
	return []string{p, p + "/"}
}

// IstioHosts are the Istio `hosts` covering an entry's hosts on a Gateway:
// Istio compares the Host with its port, so each name is listed with any
// port and with a trailing dot; a "*." wildcard as Istio's suffix match.
func IstioHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		h = strings.ToLower(h)
		if strings.HasPrefix(h, "*.") {
			out = append(out, h, h+".")
			continue
		}
		out = append(out, h, h+":*", h+".", h+".:*")
	}
	return out
}
