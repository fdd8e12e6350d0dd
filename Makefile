# fencegate — build, test, lint.
#
#   make build   the binary, bin/fencegate
#   make test    every test with -race, against real Redis, PostgreSQL, the Firestore
#                emulator, nginx and a kube-apiserver (scripts/testenv starts the servers);
#                scripts/preflight first checks (as root: installs) what they need
#   make test-unit  every package's unit tests, no services, no tool builds (go test -short)
#   make preflight  only that check, in seconds
#   make test-js the TypeScript kit's tests alone (js/, examples/orders-node; `make test` runs them)
#   make lint    gofmt, go vet, staticcheck
#   make bench   the benchmarks under bench/ (writes bench/results/)
#   make proto   regenerate api/proto
#   make image   the OCI image, as an OCI layout in bin/image (no Docker daemon)
#   make k8s-manifests  render deploy/k8s from the Helm chart

GO          ?= go
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(HOME)/go/bin/staticcheck)
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X main.version=$(VERSION)
TEST_FLAGS  ?= -race -count=1 -timeout 40m

.PHONY: build test test-js test-unit preflight test-binary tool-modules lint fmt bench proto kube-bins helm-bin promtool image k8s-manifests clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fencegate ./cmd/fencegate

# kube-bins builds (once, cached outside the repo) the kube-apiserver and etcd
# the admission e2e test runs against.
kube-bins:
	bash e2e/kube/build.sh

# helm-bin builds (once, cached outside the repo) the helm the chart tests run.
helm-bin:
	bash deploy/helm/build.sh

# promtool builds (once, cached outside the repo) the promtool that checks and
# unit-tests the alert rules in deploy/observability.
promtool:
	bash deploy/observability/build-promtool.sh

# preflight checks every tool and service the tests need before anything long
# starts, and installs what is missing when run as root with apt-get (the
# same script .ci/run uses); otherwise it lists each missing piece and stops.
preflight:
	@scripts/preflight

# test-binary builds cmd/fencegate once for every test package that runs it
# (e2e, e2e/kube, deploy/observability, bench, examples/orders), with the
# release image's flags so deploy/image's build reuses every compiled package
# (cmd/fencegate/fencegatetest).
TEST_BINARY := $(CURDIR)/bin/test/fencegate
test-binary:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -o $(TEST_BINARY) ./cmd/fencegate

# tool-modules downloads the modules of kube-apiserver, etcd, helm and promtool
# all at once (FETCH_ONLY=1: network-bound, nothing compiled); a tool already
# built is skipped. `make test` runs it next to the test binary's compile.
tool-modules:
	@FETCH_ONLY=1 bash e2e/kube/build.sh & k=$$!; FETCH_ONLY=1 bash deploy/helm/build.sh & h=$$!; \
	FETCH_ONLY=1 bash deploy/observability/build-promtool.sh & p=$$!; \
	rc=0; wait $$k || rc=1; wait $$h || rc=1; wait $$p || rc=1; exit $$rc

# After the preflight (a missing service stops the run in seconds, not after
# the builds): the tools' downloads overlap the test binary's compile, then
# the tools compile one after another (each already uses both cores).
test: preflight
	@$(MAKE) --no-print-directory -j2 tool-modules test-binary
	@$(MAKE) --no-print-directory kube-bins helm-bin promtool
	FENCEGATE_TEST_BINARY=$(TEST_BINARY) scripts/testenv $(GO) test $(TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory test-js

# test-js: the TypeScript kit (js/, @fencegate/guard) and its example
# (examples/orders-node) with node's test runner, against the servers
# scripts/testenv starts and the test binary: packages from the committed
# lockfiles (npm ci), tsc --noEmit, the Go vectors, npm pack, the demo and
# the end-to-end proof.
NPM_CI := npm ci --no-audit --no-fund --loglevel=error
test-js: test-binary
	cd js && $(NPM_CI)
	cd examples/orders-node && $(NPM_CI)
	FENCEGATE_TEST_BINARY=$(TEST_BINARY) scripts/testenv sh -c 'cd js && npm run --silent typecheck && npm test && cd ../examples/orders-node && npm test'

# test-unit runs every package's unit tests with no services: `go test -short`
# with the services' variables unset, so a test that needs Redis, PostgreSQL,
# the Firestore emulator, nginx, a kube-apiserver, helm, promtool, spin or
# Chromium skips, naming it (internal/testutil: NeedService, RedisURL,
# DatabaseURL, LookPath), rather than reach a developer's own server. `make
# test` never passes -short: there a missing service fails the test. The
# binary is built once for the packages that run it (bolt stores only here).
UNIT_FLAGS ?= -short -count=1 -timeout 10m
test-unit: test-binary
	env -u REDIS_URL -u REDIS_CLUSTER_URL -u DATABASE_URL -u FIRESTORE_EMULATOR_HOST FENCEGATE_TEST_BINARY=$(TEST_BINARY) $(GO) test $(UNIT_FLAGS) ./...

# image writes the OCI image (static binary on an empty image, user 65532) as
# an OCI layout; push it with e.g. `crane push bin/image REGISTRY/fencegate:$(VERSION)`
# or `skopeo copy oci:bin/image:$(VERSION) docker://REGISTRY/fencegate:$(VERSION)`.
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/fencegate-linux-$(IMAGE_ARCH) ./cmd/fencegate
	$(GO) run ./cmd/fencegate-image --binary bin/fencegate-linux-$(IMAGE_ARCH) --version $(VERSION) \
		--revision "$$(git rev-parse HEAD 2>/dev/null)" --out bin/image

# k8s-manifests renders deploy/k8s from the chart (deploy/helm/values-k8s.yaml);
# a test in deploy/k8s fails when the two drift.
k8s-manifests: helm-bin
	$(GO) test -count=1 -run TestManifestsRenderedFromChart ./deploy/k8s -args -update

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
