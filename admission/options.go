package admission

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/fencecheck"
)

// Path is where the webhook is served; the ValidatingWebhookConfiguration's
// clientConfig points here.
const Path = "/admission/validate"

// Default annotation names.
const (
	DefaultKeyAnnotation   = "fencegate.io/key"
	DefaultFenceAnnotation = "fencegate.io/fence"
)

// DefaultMaxBodyBytes bounds a review body. The API server caps an object at
// about 1.5 MiB (etcd's request limit) and a review can hold two of them
// (object and oldObject) plus its envelope; 3 MiB is the limit the API
// server's own request decoding uses, so nothing legitimate is refused.
const DefaultMaxBodyBytes = 3 << 20

// Source is the audit source of admission decisions.
const Source = "admission"

// Annotations names the two opt-in annotations.
type Annotations struct {
	Key   string // default DefaultKeyAnnotation
	Fence string // default DefaultFenceAnnotation
}

func (a Annotations) withDefaults() Annotations {
	if a.Key == "" {
		a.Key = DefaultKeyAnnotation
	}
	if a.Fence == "" {
		a.Fence = DefaultFenceAnnotation
	}
	return a
}

// Resource selects governed resources the way a webhook rule does: Group
// ("" is the core group, "*" any group) and Resource ("configmaps",
// "deployments/status", "*", "*/*"; without a "/" it matches the main
// resource only, not its subresources).
type Resource struct {
	Group    string
	Resource string
}

// ParseResource parses kubectl's resource.group notation, optionally with a
// subresource: "configmaps", "deployments.apps", "deployments.apps/status",
// "certificates.cert-manager.io", "*" (everything but subresources), "*/*".
func ParseResource(s string) (Resource, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Resource{}, errors.New("admission: empty resource")
	}
	name, sub, hasSub := strings.Cut(s, "/")
	res, group, _ := strings.Cut(name, ".")
	if name == "*" {
		group = "*"
	}
	if res == "" || (hasSub && sub == "") || strings.Contains(sub, "/") {
		return Resource{}, fmt.Errorf("admission: malformed resource %q (want resource[.group][/subresource])", s)
	}
	if hasSub {
		res += "/" + sub
	}
	return Resource{Group: group, Resource: strings.ToLower(res)}, nil
}

// String renders r in the notation ParseResource reads.
func (r Resource) String() string {
	res, sub, hasSub := strings.Cut(r.Resource, "/")
	s := res
	if r.Group != "" && !(r.Group == "*" && res == "*") {
		s += "." + r.Group
	}
	if hasSub {
		s += "/" + sub
	}
	return s
}

// matches reports whether r selects the requested group/resource/subresource.
func (r Resource) matches(group, resource, subresource string) bool {
	if r.Group != "*" && r.Group != group {
		return false
	}
	res, sub, hasSub := strings.Cut(r.Resource, "/")
	if res != "*" && res != resource {
		return false
	}
	if !hasSub {
		return subresource == ""
	}
	return sub == "*" || sub == subresource
}

// Options configure a Handler. The zero value governs every resource the API
// server sends, with the default annotations, policy holder, mode enforce.
type Options struct {
	// Annotations names the opt-in annotations.
	Annotations Annotations
	// Policy and Mode are passed to every check ("" is holder / enforce).
	Policy fencecheck.Policy
	Mode   fencecheck.Mode
	// Resources limits which resources are governed; empty governs whatever
	// the webhook configuration sends. A review for another resource is
	// allowed without a check (the configuration and this list disagree,
	// which is worth a metric, not an outage).
	Resources []Resource
	// ServiceAccount is the gateway's own identity, exempt from the check:
	// a full username ("system:serviceaccount:fencegate:fencegate") or
	// "namespace:name".
	ServiceAccount string
	// ExemptUsers and ExemptGroups pass without a check (break-glass
	// identities, controllers that must always be able to write).
	ExemptUsers  []string
	ExemptGroups []string
	// MaxBodyBytes bounds a review body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// CertReady reports whether the serving certificate is loaded (e.g.
	// certwatch.Watcher.Ready); nil counts as ready.
	CertReady func() bool
	// Registerer registers the admission metrics; nil leaves them
	// unregistered.
	Registerer prometheus.Registerer
	// Logger logs failures and (at debug) decisions; nil is slog.Default().
	Logger *slog.Logger
}

const serviceAccountPrefix = "system:serviceaccount:"

func (o Options) validate() (Options, error) {
	var errs []error
	o.Annotations = o.Annotations.withDefaults()
	if o.Annotations.Key == o.Annotations.Fence {
		errs = append(errs, fmt.Errorf("admission: key and fence annotations are both %q", o.Annotations.Key))
	}
	var err error
	if o.Policy, err = fencecheck.ParsePolicy(string(o.Policy)); err != nil {
		errs = append(errs, err)
	}
	if o.Mode, err = fencecheck.ParseMode(string(o.Mode)); err != nil {
		errs = append(errs, err)
	}
	for _, r := range o.Resources {
		if r.Resource == "" {
			errs = append(errs, fmt.Errorf("admission: resource with empty name in group %q", r.Group))
		}
	}
	if sa := o.ServiceAccount; sa != "" && !strings.HasPrefix(sa, serviceAccountPrefix) {
		if ns, name, ok := strings.Cut(sa, ":"); ok && ns != "" && name != "" && !strings.Contains(name, ":") {
			o.ServiceAccount = serviceAccountPrefix + sa
		} else {
			errs = append(errs, fmt.Errorf("admission: service account %q is neither %snamespace:name nor namespace:name", sa, serviceAccountPrefix))
		}
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, errors.Join(errs...)
}
