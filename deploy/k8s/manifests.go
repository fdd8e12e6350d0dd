// Package k8s holds fencegate's Kubernetes manifests (this directory's YAML
// files, applied with `kubectl apply -k deploy/k8s`). Its tests decode every
// document into the Kubernetes API types with strict field checks; the
// admission e2e test registers the webhook configuration from here against a
// real API server.
package k8s

import "embed"

// Files are the manifests, by file name.
//
//go:embed *.yaml
var Files embed.FS
