# forge: build, test, run. See README.md.
GO        ?= go
TAGS      := seccomp containers_image_openpgp exclude_graphdriver_btrfs
GOFLAGS   := -tags '$(TAGS)'
BIN       := bin/forge
CACHE     := $(or $(FORGE_CACHE_DIR),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME)/forge,$(HOME)/.cache/forge))
export CGO_ENABLED := 1
export PATH := $(PATH):/usr/local/go/bin

.PHONY: FORCE all deps build oci image image-data image-trixie test-images run test test-sdk k8s-up k8s-down test-k8s test-clients test-v2 test-api test-e2b test-agentsandbox bench-e2b test-deploy load stress fuzz bench lint clean

all: build

deps:
	@scripts/install-deps.sh

REAPER    := runtime/kernel/reaperbin/reaper
ZFORK     := runtime/kernel/reaperbin/zfork.so
SLIMINIT  := runtime/sandbox/initbin/forge-init

build: deps $(REAPER) $(ZFORK) $(SLIMINIT)
	$(GO) build $(GOFLAGS) -o $(BIN) ./cmd/forge

# The sandbox's init before it becomes the agent: libcontainer's init alone
# (see runtime/sandbox/slim_linux.go), embedded into forge. Rebuilt every time,
# as go build is incremental; the file changes only when its content does.
$(SLIMINIT): FORCE
	$(GO) build -tags 'seccomp forgeinit' -trimpath -ldflags '-s -w' -o $@.tmp ./runtime/sandbox/initbin
	@if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi

FORCE:

# The sandbox's pid 1 (see runtime/kernel/reaperbin/reaper.c), static so it runs in
# any image; embedded into forge.
$(REAPER): runtime/kernel/reaperbin/reaper.c
	$(CC) -static -Os -s -o $@ $<

# A zygote child's steps in C (see runtime/kernel/reaperbin/zfork.c): a shared object the
# template loads with ctypes, so no libc at all (-nostdlib, raw system calls) to run with any
# image's glibc; --no-undefined fails the build if the compiler asked for a libc function.
$(ZFORK): runtime/kernel/reaperbin/zfork.c
	$(CC) -shared -fPIC -nostdlib -ffreestanding -fno-builtin -fno-stack-protector -fcf-protection=none \
		-O2 -fvisibility=hidden -Wall -Wextra -Werror -Wl,--no-undefined -Wl,-z,noexecstack -s -o $@ $<

# The default image forge/python:3.11 (Debian 12's packages), and the data
# image forge/python-data:3.13 (Debian 13's: a zygote template of Python 3.12
# or later makes its heap immortal, so a live session takes less memory).
# The OCI layout is cached under ~/.cache/forge, so this is quick when done once.
image: build
	$(BIN) image bootstrap

image-data: build
	$(BIN) image bootstrap --packages python3-numpy,python3-pandas,python3-matplotlib

# The second Python: Debian 13 (trixie), forge/python:3.13 (the data image's).
image-trixie: build
	$(BIN) image bootstrap --suite trixie

run: build image
	$(BIN) serve

# forge's own OCI image (an OCI layout at build/oci/forge), built with
# forge's image code: see scripts/oci.sh and docs/deploy.md.
oci: build image
	scripts/oci.sh

# The state dir the tests share (test/testutil.StateDir).
FORGE_TEST_STATE_DIR ?= /var/lib/forge-test
export FORGE_TEST_STATE_DIR

# Tests of several packages run in parallel on one store: import the images
# once, up front (a no-op when present), so no two test processes race to.
test-images: image image-data image-trixie
	$(BIN) --state-dir $(FORGE_TEST_STATE_DIR) image import oci:$(CACHE)/images/forge_python_3.11
	$(BIN) --state-dir $(FORGE_TEST_STATE_DIR) image import oci:$(CACHE)/images/forge_python-data_3.13
	$(BIN) --state-dir $(FORGE_TEST_STATE_DIR) image import oci:$(CACHE)/images/forge_python_3.13

# The downstream MCP server of the code-mode tests (test/testenv.MCPServer),
# built here so the tests need no Go toolchain when they run.
MCPSERVER := bin/mcpserver
$(MCPSERVER): FORCE
	CGO_ENABLED=0 $(GO) build -o $@ ./testdata/mcpserver
TESTENV   := FORGE_TEST_MCPSERVER=$(CURDIR)/$(MCPSERVER)

# test/stress runs its short form here (FORGE_STRESS_RUNS unset).
test: build test-images $(MCPSERVER)
	$(TESTENV) $(GO) test $(GOFLAGS) -race -count=1 -timeout 40m ./...
	$(MAKE) --no-print-directory test-deploy
	$(MAKE) --no-print-directory test-sdk
	$(MAKE) --no-print-directory test-api
	$(MAKE) --no-print-directory test-e2b
	$(MAKE) --no-print-directory test-agentsandbox
	@if [ -f test/clients/package.json ]; then $(MAKE) --no-print-directory test-clients; fi
	$(MAKE) --no-print-directory test-v2
	$(MAKE) --no-print-directory test-k8s

# A one-node Kubernetes v1.34.4 on this machine (scripts/k8s, docs/deploy.md):
# built from the Go module proxy (test/k8s/kbin, cached), on Debian's
# containerd, everything on loopback, forge's image (make oci) loaded.
# k8s-up prints the kubeconfig and PATH to use; k8s-down stops it and cleans
# the host. test-k8s: up, the suite test/k8s on it, down.
k8s-up: oci
	scripts/k8s/up.sh

k8s-down:
	scripts/k8s/down.sh

test-k8s: oci
	scripts/k8s/test.sh

# The sandbox tests in a pure cgroup v2 guest under qemu (scripts/v2-guest.sh;
# README "Tests" says how long it takes). V2_RUN=REGEX picks tests.
test-v2: build image
	@scripts/install-deps.sh v2
	scripts/v2-guest.sh

# forge_tools (sdk/python): pytest, with pydantic (installed into a venv if missing).
test-sdk:
	sdk/python/test.sh

test-clients:
	scripts/test-clients.sh

# The REST API against its OpenAPI document: schemathesis (pinned, in a
# venv), a bounded number of requests per operation; no 5xx, every
# response as documented. Then a short load (make load for the long one).
test-api: build test-images
	scripts/test-api.sh

# The official E2B SDKs (pinned: Python in a venv, JavaScript in test/e2b)
# against forge serve's E2B face; see docs/e2b.md. bench-e2b: the SDK's
# create + first run_code and warm run_code beside the REST API and python3 -c.
test-e2b: build test-images
	scripts/test-e2b.sh

bench-e2b: build test-images
	scripts/test-e2b.sh --bench-only

# The official kubernetes-sigs/agent-sandbox client (k8s-agent-sandbox, pinned,
# in a venv) against forge serve's agent-sandbox face, in its direct mode;
# see docs/deploy.md, agent-sandbox.
test-agentsandbox: build test-images
	scripts/test-agentsandbox.sh

# 60 s of POST /api/v1/execute at concurrency 16 against bin/forge serve:
# no 5xx, flat RSS, p50/p99 printed (make test runs a 10 s form).
LOAD_DURATION ?= 60s
load: build test-images
	FORGE_LOAD_DURATION=$(LOAD_DURATION) $(GO) test $(GOFLAGS) -count=1 -timeout 10m -v -run TestExecuteLoad ./test/load

# deploy/ (its own Go module): the systemd units, the kustomization, the
# compose file, the example configurations and forge's OCI image, each
# loaded with its tool's library and checked against the forge built here.
test-deploy: build test-images
	cd deploy && FORGE_TEST_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m ./...

# The full stress and fault suite (test/stress): STRESS_RUNS executions at
# concurrency 8, then the fault tests; then STRESS_RUNS zygote children at
# concurrency 8 (make test makes 200). Without -race, so the throughput it
# reports is forge's own; make test runs the short form with -race.
STRESS_RUNS ?= 10000
stress: build test-images $(MCPSERVER)
	$(TESTENV) FORGE_STRESS_RUNS=$(STRESS_RUNS) $(GO) test $(GOFLAGS) -count=1 -timeout 60m -v ./test/stress
	FORGE_TEST_ZYGOTE_CHILDREN=$(STRESS_RUNS) $(GO) test $(GOFLAGS) -count=1 -timeout 60m -v -run 'TestZygoteManyChildren$$' ./runtime/sandbox

# Every fuzz target for FUZZTIME each; the corpus lives in each package's
# testdata/fuzz/<Target>, and new failing inputs land there too.
FUZZTIME ?= 20s
fuzz:
	GO='$(GO)' GOFLAGS_TAGS='$(TAGS)' FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

bench: build image
	$(GO) test $(GOFLAGS) -run '^$$' -bench . -benchtime 200x ./...
	$(BIN) bench
	PYTHONPATH=sdk/python python3 -m forge_tools bench

lint:
	gofmt -l . | (! grep .)
	$(GO) vet $(GOFLAGS) ./...

clean:
	rm -rf bin $(REAPER)
