# forge: build, test, run. See README.md.
GO        ?= go
TAGS      := seccomp containers_image_openpgp exclude_graphdriver_btrfs
GOFLAGS   := -tags '$(TAGS)'
BIN       := bin/forge
CACHE     := $(or $(FORGE_CACHE_DIR),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME)/forge,$(HOME)/.cache/forge))
export CGO_ENABLED := 1
export PATH := $(PATH):/usr/local/go/bin

.PHONY: FORCE all deps build image image-data test-images run test test-sdk test-clients stress fuzz bench lint clean

all: build

deps:
	@scripts/install-deps.sh

REAPER    := runtime/kernel/reaperbin/reaper
SLIMINIT  := runtime/sandbox/initbin/forge-init

build: deps $(REAPER) $(SLIMINIT)
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

# The default image forge/python:3.11 (and the data image) from Debian packages.
# The OCI layout is cached under ~/.cache/forge, so this is quick when done once.
image: build
	$(BIN) image bootstrap

image-data: build
	$(BIN) image bootstrap --packages python3-numpy,python3-pandas,python3-matplotlib

run: build image
	$(BIN) serve

# The state dir the tests share (internal/testutil.StateDir).
FORGE_TEST_STATE_DIR ?= /var/lib/forge-test
export FORGE_TEST_STATE_DIR

# Tests of several packages run in parallel on one store: import the images
# once, up front (a no-op when present), so no two test processes race to.
test-images: image image-data
	$(BIN) --state-dir $(FORGE_TEST_STATE_DIR) image import oci:$(CACHE)/images/forge_python_3.11
	$(BIN) --state-dir $(FORGE_TEST_STATE_DIR) image import oci:$(CACHE)/images/forge_python-data_3.11

# The downstream MCP server of the code-mode tests (internal/testenv.MCPServer),
# built here so the tests need no Go toolchain when they run.
MCPSERVER := bin/mcpserver
$(MCPSERVER): FORCE
	CGO_ENABLED=0 $(GO) build -o $@ ./testdata/mcpserver
TESTENV   := FORGE_TEST_MCPSERVER=$(CURDIR)/$(MCPSERVER)

# test/stress runs its short form here (FORGE_STRESS_RUNS unset).
test: build test-images $(MCPSERVER)
	$(TESTENV) $(GO) test $(GOFLAGS) -race -count=1 -timeout 40m ./...
	$(MAKE) --no-print-directory test-sdk
	@if [ -f test/clients/package.json ]; then $(MAKE) --no-print-directory test-clients; fi

# forge_tools (sdk/python): pytest, with pydantic (installed into a venv if missing).
test-sdk:
	sdk/python/test.sh

test-clients:
	scripts/test-clients.sh

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
