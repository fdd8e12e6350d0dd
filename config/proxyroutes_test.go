package config

import (
	"strings"
	"testing"
	"time"
)

// TestReloadChecksProxyRoutes: proxy.routes are part of the route table a
// reload applies (the proxy serves the table it reloads), so
// ValidateRoutes — what a reload checks — refuses their bad options as
// the start does. Before, only Validate (the start) looked at them, and a
// reload applied a negative body bound as the default.
func TestReloadChecksProxyRoutes(t *testing.T) {
	ok := ProxyRoute{Prefix: "/a", Upstream: "http://127.0.0.1:9"}
	for name, tc := range map[string]struct {
		mutate func(*ProxyRoute)
		want   string
	}{
		"body timeout below 1ms":   {func(r *ProxyRoute) { r.BodyTimeout = Duration(time.Microsecond) }, "bodyTimeout: must be between"},
		"negative body idle":       {func(r *ProxyRoute) { r.BodyIdleTimeout = Duration(-time.Second) }, "bodyIdleTimeout: must be between"},
		"maxWrite without barrier": {func(r *ProxyRoute) { r.MaxWrite = Duration(time.Second) }, "set without barrier"},
		"no upstream":              {func(r *ProxyRoute) { r.Upstream = "" }, "upstream: required"},
	} {
		t.Run(name, func(t *testing.T) {
			r := ok
			tc.mutate(&r)
			c := Default()
			c.Proxy.Routes = []ProxyRoute{r}
			err := c.ValidateRoutes()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateRoutes = %v, want a problem containing %q", err, tc.want)
			}
			// The start reports it once, not twice.
			if err := c.Validate(); err == nil || strings.Count(err.Error(), tc.want) != 1 {
				t.Fatalf("Validate = %v, want %q once", err, tc.want)
			}
		})
	}
	c := Default()
	c.Proxy.Routes = []ProxyRoute{ok}
	if err := c.ValidateRoutes(); err != nil {
		t.Fatalf("a valid proxy route: %v", err)
	}
}
