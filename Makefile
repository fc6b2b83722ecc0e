# forge: build, test, run. See README.md.
GO        ?= go
TAGS      := seccomp containers_image_openpgp exclude_graphdriver_btrfs
GOFLAGS   := -tags '$(TAGS)'
BIN       := bin/forge
export CGO_ENABLED := 1
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all deps build image image-data run test test-go test-clients bench lint clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(GO) build $(GOFLAGS) -o $(BIN) ./cmd/forge

# The default image forge/python:3.11 (and the data image) from Debian packages.
# The OCI layout is cached under ~/.cache/forge, so this is quick when done once.
image: build
	$(BIN) image bootstrap

image-data: build
	$(BIN) image bootstrap --packages python3-numpy,python3-pandas,python3-matplotlib

run: build image
	$(BIN) serve

test: build image image-data
	$(GO) test $(GOFLAGS) -race -count=1 -timeout 40m ./...
	@if [ -f test/clients/package.json ]; then $(MAKE) --no-print-directory test-clients; fi

test-clients:
	scripts/test-clients.sh

bench: build image
	$(GO) test $(GOFLAGS) -run '^$$' -bench . -benchtime 200x ./...
	$(BIN) bench

lint:
	gofmt -l . | (! grep .)
	$(GO) vet $(GOFLAGS) ./...

clean:
	rm -rf bin
