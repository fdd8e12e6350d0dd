// Package k8s holds fencegate's Kubernetes manifests (this directory's YAML
// files, applied with `kubectl apply -k deploy/k8s`). They are the Helm chart
// deploy/helm/fencegate rendered with deploy/helm/values-k8s.yaml
// (`make k8s-manifests`); a test fails when the two drift. Its tests decode
// every document into the Kubernetes API types with strict field checks; the
// admission e2e test registers the webhook configuration from here against a
// real API server, and e2e/kube applies all of them as a server-side dry run.
package k8s

import "embed"

// Files are the manifests, by file name.
//
//go:embed *.yaml
var Files embed.FS
