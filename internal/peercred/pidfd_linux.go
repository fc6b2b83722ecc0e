//go:build amd64 || arm64 || 386 || arm || riscv64 || loong64

package peercred

// soPeerPidfd is SO_PEERPIDFD of asm-generic/socket.h (Linux 6.5), which
// golang.org/x/sys does not define yet.
const soPeerPidfd = 77
