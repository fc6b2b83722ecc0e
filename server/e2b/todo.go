package e2b

import "net/http"

// Handlers of E1 not written yet (removed one by one).

func notYet(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, r.Method+" "+r.URL.Path+": not implemented yet")
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request)     { notYet(w, r) }
func (h *Handler) listV1(w http.ResponseWriter, r *http.Request)     { notYet(w, r) }
func (h *Handler) listV2(w http.ResponseWriter, r *http.Request)     { notYet(w, r) }
func (h *Handler) getInfo(w http.ResponseWriter, r *http.Request)    { notYet(w, r) }
func (h *Handler) kill(w http.ResponseWriter, r *http.Request)       { notYet(w, r) }
func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) { notYet(w, r) }
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request)    { notYet(w, r) }
func (h *Handler) pause(w http.ResponseWriter, r *http.Request)      { notYet(w, r) }
func (h *Handler) resume(w http.ResponseWriter, r *http.Request)     { notYet(w, r) }
func (h *Handler) connect(w http.ResponseWriter, r *http.Request)    { notYet(w, r) }
func (h *Handler) reaper()                                           { h.reaped.Done() }

func (h *Handler) execute(w http.ResponseWriter, r *http.Request, sb *Sandbox) { notYet(w, r) }
func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	notYet(w, r)
}
func (h *Handler) createContext(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	notYet(w, r)
}
func (h *Handler) restartContext(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	notYet(w, r)
}
func (h *Handler) removeContext(w http.ResponseWriter, r *http.Request, sb *Sandbox) {
	notYet(w, r)
}
