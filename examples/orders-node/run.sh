#!/usr/bin/env bash
# run.sh — the Node orders example (Express + PostgreSQL + @fencegate/guard), end to end, with one command:
#
#   examples/orders-node/run.sh          # start everything, walk through the demo, keep running (Ctrl-C stops)
#   examples/orders-node/run.sh --demo   # the same, then stop (exit status 0 if every step answered as expected)
#   examples/orders-node/run.sh --prove  # the end-to-end proof (test/e2e.test.js): PostgreSQL and Redis, with and without the helper
#
# Starts a throwaway PostgreSQL (and Redis for --prove) unless DATABASE_URL is
# set (scripts/testenv does it), then walks through examples/demo.sh (the demo
# the Go example shares) with this folder's API (node server.js).
# Needs: go, node >= 20 and npm, PostgreSQL's binaries, curl, python3; nginx
# for the nginx half.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

if [[ ${1:-} == --prove && -z ${REDIS_URL:-} || -z ${DATABASE_URL:-} ]]; then
	if [[ ${1:-} == --prove ]]; then
		exec env FIRESTORE_EMULATOR_HOST=unused scripts/testenv "$0" "$@"
	fi
	# Only PostgreSQL is needed: mark the other services as provided.
	exec env REDIS_URL=unused FIRESTORE_EMULATOR_HOST=unused scripts/testenv "$0" "$@"
fi

api_what="@fencegate/guard; installing the orders API's packages"
build_api() {
	# npm ci only when the packages are missing (make test-js runs it every time).
	(cd js && { [[ -d node_modules ]] || npm ci --no-audit --no-fund --loglevel=error; } && npm run --silent build)
	(cd examples/orders-node && { [[ -d node_modules ]] || npm ci --no-audit --no-fund --loglevel=error; })
	if [[ ${1:-} == --prove ]]; then
		(cd examples/orders-node && FENCEGATE_TEST_BINARY=$tmp/fencegate node --test test/e2e.test.js)
		exit
	fi
}
start_api() { exec node examples/orders-node/server.js --listen "$1" --gateway "$2" --table "$3" --queue-delay-ms 60000; }

source examples/demo.sh
demo_main "$@"
