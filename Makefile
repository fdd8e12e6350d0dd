# fencegate — build, test, lint.
#
#   make build   the binary, bin/fencegate
#   make test    every test with -race, against real Redis, PostgreSQL, the Firestore
#                emulator, nginx and a kube-apiserver (scripts/testenv starts the servers)
#   make lint    gofmt, go vet, staticcheck
#   make bench   the benchmarks under bench/ (writes bench/results/)
#   make proto   regenerate api/proto

GO          ?= go
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(HOME)/go/bin/staticcheck)
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X main.version=$(VERSION)
TEST_FLAGS  ?= -race -count=1 -timeout 40m

.PHONY: build test test-unit lint fmt bench proto kube-bins promtool clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fencegate ./cmd/fencegate

# kube-bins builds (once, cached outside the repo) the kube-apiserver and etcd
# the admission e2e test runs against.
kube-bins:
	bash e2e/kube/build.sh

# promtool builds (once, cached outside the repo) the promtool that checks and
# unit-tests the alert rules in deploy/observability.
promtool:
	bash deploy/observability/build-promtool.sh

test: kube-bins promtool
	scripts/testenv $(GO) test $(TEST_FLAGS) ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

bench:
	scripts/testenv $(GO) test -run '^$$' -bench . -benchtime 3s ./bench/...

proto:
	bash api/proto/gen.sh

clean:
	rm -rf bin
