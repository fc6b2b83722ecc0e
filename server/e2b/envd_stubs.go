package e2b

import "net/http"

// Stubs of envd's handlers (E2 replaces them: delete a stub here when its
// real one lands in files.go, process.go or fs.go). The router (e2b.go)
// calls them with the sandbox already authenticated (Handler.sandbox).

func (h *Handler) serveFiles(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	writeError(w, http.StatusNotImplemented, "files: not implemented yet")
}

func (h *Handler) serveProcess(w http.ResponseWriter, r *http.Request, sb *Sandbox, method string) {
	writeError(w, http.StatusNotImplemented, "process."+method+": not implemented yet")
}
