#!/usr/bin/env bash
# build.sh builds the helm command line from the Go module proxy, for the chart
# tests (helm lint, helm template) and for rendering deploy/k8s from the chart.
# No release download, no package manager: the module proxy is all it needs.
#
# The binary lands in ${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/helm/<version>/helm,
# outside the repository, and is reused when it already exists (the directory
# name is the cache key). It is built in its own throwaway module, so helm's
# dependencies never enter fencegate's go.mod. A cold build takes a few minutes
# on two cores; set HELM_BUILD_P=1 to build one package at a time on a shared
# machine.
#
# FETCH_ONLY=1 only resolves and downloads the modules (see e2e/kube/build.sh).
#
# Keep HELM_VERSION in step with deploy/helm/helm.go (a test checks this).
set -euo pipefail

HELM_VERSION=v3.22.0

CACHE="${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/helm"
DIR="$CACHE/$HELM_VERSION"
export GOFLAGS="${GOFLAGS:-} -p=${HELM_BUILD_P:-2} -buildvcs=false"
export CGO_ENABLED=0

log() { printf '%s helm/build.sh: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -x "$DIR/helm" ]]; then
	log "helm $HELM_VERSION already built at $DIR"
else
	mod="$CACHE/src/helm-$HELM_VERSION"
	rm -rf "$mod" && mkdir -p "$mod" "$DIR"
	printf 'module fencegate.local/helmbuild\n\ngo 1.25.0\n' >"$mod/go.mod"
	if [[ -n ${FETCH_ONLY:-} ]]; then
		log "fetching the modules of helm $HELM_VERSION"
		(cd "$mod" && go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
		exit 0
	fi
	log "building helm $HELM_VERSION (minutes on a cold cache)"
	(
		cd "$mod"
		go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
		# helm reports its version from these variables (without them
		# `helm version` says v3.x-dev), and assumes the Kubernetes version
		# of its client-go (v0.X → 1.X) for .Capabilities and lint, as its
		# own Makefile sets; left alone it assumes 1.20.
		local_k8s="$(go list -m -f '{{.Version}}' k8s.io/client-go)"
		k8s_minor="$(echo "$local_k8s" | cut -d. -f2)"
		go build -trimpath \
			-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean
				-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor
				-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor" \
			-o "$DIR/helm.tmp" helm.sh/helm/v3/cmd/helm
	)
	mv "$DIR/helm.tmp" "$DIR/helm"
	log "helm ready: $DIR/helm"
fi
[[ -z ${FETCH_ONLY:-} ]] || exit 0
echo "HELM=$DIR/helm"
