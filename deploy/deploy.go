// Package deploy holds forge's deployment artefacts (systemd units, a
// Kubernetes kustomization, a compose file, example configurations) and
// the tests that load each with the tool's own libraries and check it
// against forge itself. It is a module of its own, so the Kubernetes and
// compose libraries never reach forge's binary.
package deploy
