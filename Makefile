# skillbox: `make demo` sets up a fresh Debian 12 machine (as root) and runs a
# sample skill script in gVisor; `make test` runs the unit tests, and as root
# also the integration tests against real runsc and runc containers.

GO        ?= go
BIN       := bin/skillbox
IMAGES    ?= /var/lib/skillbox/images
ROOT      := $(shell id -u)
GOFLAGS_TEST ?= -count=1
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)

export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build test unit integration deps kube-cache images demo fuzz bench lint clean modules console console-check

all: build

# The module downloads in one quiet step (a fresh machine would otherwise
# print a "go: downloading" line per module).
modules:
	@$(GO) mod download

# Static (CGO_ENABLED=0): the same binary is the agent in kubernetes pods,
# whose images need not have this host's C library.
build: modules
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/skillbox

lint: modules
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...

unit: modules
	$(GO) test $(GOFLAGS_TEST) ./...

# Integration tests need root, runsc, runc and the interpreter images; they run
# one package at a time so two cores are not oversubscribed by sandboxes.
# The kubernetes runtime's tests run on a two-node test cluster
# (hack/kube.sh; KUBE_NODES=1 for one node, less time and memory).
integration: deps console-check build kube-cache images
	SKILLBOX_IMAGES=$(IMAGES) SKILLBOX_BIN=$(CURDIR)/$(BIN) SKILLBOX_TEST_BUILD=1 SKILLBOX_TEST_NPM_REGISTRY=1 SKILLBOX_TEST_REQUIRE_SANDBOXES=1 \
	  $(GO) test $(GOFLAGS_TEST) -p 1 -timeout 40m -tags integration ./...

ifeq ($(ROOT),0)
test: lint integration
else
test: lint unit
	@echo "make test: not root, so the integration tests (real runsc/runc sandboxes) were skipped; run 'sudo make test' to include them"
endif

deps:
	./hack/install-deps.sh

# The console's pages: sources in sandbox/doors/console/web/src, built into dist/
# (committed, embedded with go:embed) from the locked npm packages. The
# build is deterministic, so console-check rebuilds and fails when the
# committed dist/ is not what the sources build to.
CONSOLE_WEB := sandbox/doors/console/web
console:
	@command -v npm >/dev/null 2>&1 || { echo "console: Node.js 20 and npm are needed to build the console's pages ($(CONSOLE_WEB)); install them (the machine's nodejs package)"; exit 1; }
	cd $(CONSOLE_WEB) && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build

console-check: console
	@out=$$(git status --porcelain -- $(CONSOLE_WEB)/dist); if [ -n "$$out" ]; then \
	  echo "console-check: $(CONSOLE_WEB)/dist differs from a rebuild of its sources; commit the rebuilt dist:"; echo "$$out"; exit 1; fi

# The test cluster's Kubernetes (about 12 minutes of two cores the first
# time, cached after) builds in the background at low priority while the
# images build and the first packages test; the cluster tests' `up` waits
# for it.
KUBE_BUILD_LOG ?= /var/tmp/skillbox-kube-build.log
kube-cache:
	@echo "kube: building the test cluster's Kubernetes in the background if not cached (log $(KUBE_BUILD_LOG))"
	@nohup ./hack/kube.sh build >$(KUBE_BUILD_LOG) 2>&1 &

# Every image, each built once per run and skipped when current (CI, tests).
images: build
	$(BIN) images build --if-needed --dir $(IMAGES)

# The demo builds only the image its script runs in (python, the default for
# .py): the other images are built by `make images` or on first use, so a
# fresh machine gets through the demo in minutes (docs/BENCHMARKS.md).
DEMO_IMAGES ?= python

# Recipes unechoed: the image build and hack/demo.sh print their own progress.
demo: deps build
	@$(BIN) images build --if-needed --dir $(IMAGES) $(DEMO_IMAGES)
	@SKILLBOX_IMAGES=$(IMAGES) ./hack/demo.sh

fuzz:
	./hack/fuzz.sh 8s

bench: build
	$(BIN) bench

clean:
	rm -rf bin
