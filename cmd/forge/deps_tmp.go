package main

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/mark3labs/mcp-go/server"
	_ "github.com/mark3labs/mcp-go/client"
	_ "github.com/moby/profiles/seccomp"
	_ "github.com/opencontainers/cgroups"
	_ "github.com/opencontainers/cgroups/devices"
	_ "github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	_ "github.com/opencontainers/runc/libcontainer/specconv"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "go.podman.io/image/v5/copy"
	_ "go.podman.io/image/v5/transports/alltransports"
	_ "go.podman.io/image/v5/oci/layout"
	_ "go.podman.io/image/v5/storage"
	_ "go.podman.io/storage"
	_ "go.podman.io/storage/pkg/reexec"
	_ "go.yaml.in/yaml/v3"
	_ "github.com/cyphar/filepath-securejoin"
	_ "golang.org/x/sys/unix"
)

func main() {}
