#!/usr/bin/env bash
# build.sh builds a real kube-apiserver and etcd from the Go module proxy, for the
# e2e test in this folder. No kind, no minikube, no container runtime: the two
# binaries are all a validating webhook needs to be exercised by a real API server.
#
# The binaries land in ${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/kube/<version>/,
# outside the repository, and are reused when they already exist (the directory
# name is the cache key). A cold build (modules downloaded, kube-apiserver and
# etcd compiled) takes 10-20 minutes on two cores and ~3 GB of memory: it
# measured 19.5 minutes on a machine busy with other work. Set KUBE_BUILD_P=1 to
# build one package at a time on a shared machine.
#
# FETCH_ONLY=1 only resolves and downloads the modules (network-bound), so
# `make test` can fetch every tool's modules at once and compile them after.
#
# Keep the versions in step with e2e/kube/binaries.go (a test checks this).
set -euo pipefail

KUBE_VERSION=v1.35.4
# k8s.io/kubernetes is not consumable as a plain dependency: its go.mod points every
# k8s.io/* staging module at ./staging/src/..., and those replace directives are
# ignored outside its own repository. The published staging modules carry the same
# code at v0.<minor>.<patch>.
STAGING_VERSION=v0.35.4
# The etcd release k8s.io/kubernetes v1.35.4 itself depends on.
ETCD_VERSION=v3.6.5

CACHE="${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/kube"
KUBE_DIR="$CACHE/kube-apiserver-$KUBE_VERSION"
ETCD_DIR="$CACHE/etcd-$ETCD_VERSION"
export GOFLAGS="${GOFLAGS:-} -p=${KUBE_BUILD_P:-2} -buildvcs=false"
export CGO_ENABLED=0

log() { printf '%s build.sh: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

build_kube() {
	if [[ -x "$KUBE_DIR/kube-apiserver" ]]; then
		log "kube-apiserver $KUBE_VERSION already built at $KUBE_DIR"
		return
	fi
	local mod="$CACHE/src/kube-$KUBE_VERSION"
	rm -rf "$mod" && mkdir -p "$mod" "$KUBE_DIR"
	log "resolving k8s.io/kubernetes@$KUBE_VERSION"
	local gomod
	gomod="$(cd "$mod" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
	[[ -f "$gomod" ]] || { log "could not download k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
	{
		echo "module fencegate.local/kubebuild"
		echo
		echo "go 1.25.0"
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		echo "replace ("
		# Every module k8s.io/kubernetes maps to ./staging becomes the published version.
		grep -E '^[[:space:]]*k8s\.io/[^ ]+ => \./staging/' "$gomod" |
			awk -v v="$STAGING_VERSION" '{ printf "\t%s => %s %s\n", $1, $1, v }'
		echo ")"
	} >"$mod/go.mod"
	local pkg=k8s.io/component-base/version
	if [[ -n ${FETCH_ONLY:-} ]]; then
		log "fetching the modules of kube-apiserver $KUBE_VERSION"
		(cd "$mod" && go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION")
		return
	fi
	log "building kube-apiserver $KUBE_VERSION (slow: minutes)"
	(
		cd "$mod"
		go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION"
		go build -trimpath \
			-ldflags "-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=35 -X $pkg.gitTreeState=clean" \
			-o "$KUBE_DIR/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
	)
	mv "$KUBE_DIR/kube-apiserver.tmp" "$KUBE_DIR/kube-apiserver"
	log "kube-apiserver ready: $KUBE_DIR/kube-apiserver"
}

build_etcd() {
	if [[ -x "$ETCD_DIR/etcd" ]]; then
		log "etcd $ETCD_VERSION already built at $ETCD_DIR"
		return
	fi
	local mod="$CACHE/src/etcd-$ETCD_VERSION"
	rm -rf "$mod" && mkdir -p "$mod" "$ETCD_DIR"
	printf 'module fencegate.local/etcdbuild\n\ngo 1.25.0\n' >"$mod/go.mod"
	if [[ -n ${FETCH_ONLY:-} ]]; then
		log "fetching the modules of etcd $ETCD_VERSION"
		(cd "$mod" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
		return
	fi
	log "building etcd $ETCD_VERSION"
	(
		cd "$mod"
		go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
		go build -trimpath -ldflags "-s -w" -o "$ETCD_DIR/etcd.tmp" go.etcd.io/etcd/server/v3
	)
	mv "$ETCD_DIR/etcd.tmp" "$ETCD_DIR/etcd"
	log "etcd ready: $ETCD_DIR/etcd"
}

build_etcd
build_kube
[[ -z ${FETCH_ONLY:-} ]] || exit 0
echo "KUBE_APISERVER=$KUBE_DIR/kube-apiserver"
echo "ETCD=$ETCD_DIR/etcd"
