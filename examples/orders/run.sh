#!/usr/bin/env bash
# run.sh — the orders example, end to end, with one command:
#
#   examples/orders/run.sh          # start everything, walk through the demo, keep running (Ctrl-C stops)
#   examples/orders/run.sh --demo   # the same, then stop (exit status 0 if every step answered as expected)
#
# Starts a throwaway PostgreSQL (unless DATABASE_URL is set; scripts/testenv
# does it), then walks through examples/demo.sh (the demo the Node example
# shares) with the Go orders API built from this folder.
# Needs: go, PostgreSQL's binaries, curl, python3; nginx for the nginx half.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

if [[ -z ${DATABASE_URL:-} ]]; then
	# Only PostgreSQL is needed: mark the other services as provided.
	exec env REDIS_URL=unused FIRESTORE_EMULATOR_HOST=unused scripts/testenv "$0" "$@"
fi

api_what="the orders API"
build_api() { CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$tmp/orders" ./examples/orders; }
start_api() { exec "$tmp/orders" --listen "$1" --gateway "$2" --table "$3" --queue-delay 10m; }

source examples/demo.sh
demo_main "$@"
