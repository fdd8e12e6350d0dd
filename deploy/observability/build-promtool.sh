#!/usr/bin/env bash
# build-promtool.sh builds promtool (the Prometheus rule checker and rule unit-test
# runner) from the Go module proxy, for the tests in this folder. Like
# e2e/kube/build.sh it builds once, outside the repository, into
# ${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/promtool/<version>/ and reuses the binary
# when it exists (the directory name is the cache key).
#
# Prometheus publishes its Go module as v0.<major*100+minor>.<patch>;
# `go list -m -versions github.com/prometheus/prometheus` lists them. Keep
# PROMTOOL_VERSION in step with promtoolVersion in observability_test.go (a test
# checks this). Set PROMTOOL_BUILD_P=1 to build one package at a time.
#
# Cold cost, measured on two cores shared with other builds (load ~15): module
# download 2.5 minutes (network-bound), compile and link 7.8 minutes wall with an
# empty build cache (2.7 minutes of CPU). Without the remove_all_sd tag below the
# compile was still running after 19 minutes. FETCH_ONLY=1 only resolves and
# downloads the modules (see e2e/kube/build.sh).
set -euo pipefail

PROMTOOL_VERSION=v0.316.0

DIR="${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/promtool/$PROMTOOL_VERSION"
SRC="${FENCEGATE_CACHE:-$HOME/.cache/fencegate}/promtool/src-$PROMTOOL_VERSION"
export GOFLAGS="${GOFLAGS:-} -p=${PROMTOOL_BUILD_P:-${KUBE_BUILD_P:-2}} -buildvcs=false"
export CGO_ENABLED=0

log() { printf '%s build-promtool.sh: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -x "$DIR/promtool" ]]; then
	log "promtool $PROMTOOL_VERSION already built at $DIR"
else
	rm -rf "$SRC" && mkdir -p "$SRC" "$DIR"
	printf 'module fencegate.local/promtoolbuild\n\ngo 1.25.0\n' >"$SRC/go.mod"
	if [[ -n ${FETCH_ONLY:-} ]]; then
		log "fetching the modules of promtool $PROMTOOL_VERSION"
		(cd "$SRC" && go get "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION")
		exit 0
	fi
	log "building promtool $PROMTOOL_VERSION (minutes on a cold cache)"
	(
		cd "$SRC"
		go get "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION"
		# remove_all_sd leaves out the service-discovery plugins (cloud SDKs),
		# which rule checking and rule unit tests never use: most of the build.
		go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$DIR/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool
	)
	mv "$DIR/promtool.tmp" "$DIR/promtool"
	log "promtool ready: $DIR/promtool"
fi
[[ -z ${FETCH_ONLY:-} ]] || exit 0
echo "PROMTOOL=$DIR/promtool"
