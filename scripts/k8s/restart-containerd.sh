#!/usr/bin/env bash
# restart-containerd.sh: stop the test node's containerd (SIGTERM to its
# recorded pid) and start it again with the same configuration, as a node's
# runtime upgrade or crash would. Running containers keep running in their
# shims; the kubelet reconnects.
source "$(dirname "$0")/lib.sh"
alive containerd || die "containerd of $D is not running"
stop containerd 15
start containerd containerd --config "$D/ctd/config.toml"
wait_for containerd 60 ctr version
log "containerd restarted"
