#!/usr/bin/env bash
# Regenerates the Go code for api/proto. Called by `make proto`.
#
# Needs protoc (apt-get install -y protobuf-compiler) and the plugins at the
# versions that match go.mod:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.1
set -euo pipefail

cd "$(dirname "$0")"
PATH="$(go env GOPATH)/bin:$PATH"

for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "gen.sh: $tool not found (see the header of $0)" >&2; exit 1; }
done

protoc -I . \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  fencegate/v1/locks.proto
