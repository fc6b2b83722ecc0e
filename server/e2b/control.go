package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-forge/forge/runtime/engine"
	"github.com/mcp-forge/forge/runtime/session"
	"github.com/mcp-forge/forge/server/rest"
)

// The control plane: sandboxes as forge sessions of the API key's
// principal. Another principal's sandbox answers exactly like an unknown
// one (404).

// Templates of the SDKs, which run e2b.default_template.
var sdkTemplates = map[string]bool{"": true, "base": true, "code-interpreter-v1": true}

// maxControlBody bounds a control-plane JSON body (metadata and envVars
// included).
const maxControlBody = 256 << 10

// Bounds of what a create keeps of the client's metadata and envVars.
const (
	maxEntries  = 64
	maxKeyLen   = 256
	maxValueLen = 4096
)

// newSandbox is the body of create (v1 NewSandbox and v2 NewSandboxV2).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network      json.RawMessage `json:"network"`
	MCP          json.RawMessage `json:"mcp"`
	IAM          json.RawMessage `json:"iam"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

// sandboxReply is the API's Sandbox (create, connect).
type sandboxReply struct {
	TemplateID      string  `json:"templateID"`
	SandboxID       string  `json:"sandboxID"`
	Alias           string  `json:"alias,omitempty"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
}

// sandboxDetail is the API's SandboxDetail and ListedSandbox.
type sandboxDetail struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       string            `json:"startedAt"`
	EndAt           string            `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	Domain          *string           `json:"domain"`
}

// clientID is the deprecated field the API still requires.
const clientID = "forge"

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	p, ok := h.principal(w, r)
	if !ok {
		return
	}
	var req newSandbox
	if !decodeBody(w, r, &req) {
		return
	}
	if msg := refusedOptions(&req); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	timeout, msg := h.timeout(req.Timeout)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	for name, m := range map[string]map[string]string{"metadata": req.Metadata, "envVars": req.EnvVars} {
		if msg := checkMap(name, m); msg != "" {
			writeError(w, http.StatusBadRequest, msg)
			return
		}
	}
	image, err := h.templateImage(r.Context(), req.TemplateID)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	id := session.NewID()
	now := h.opts.Now().UTC()
	sb := &Sandbox{ID: id, Owner: p.Tenant, Template: cmpOr(req.TemplateID, "base"), Image: image,
		Created: now, EndAt: now.Add(timeout), Metadata: req.Metadata, EnvVars: req.EnvVars}
	sb.TokenHash = tokenHash(h.tokenFor(sb.Owner, sb.ID))
	// The session is made by a first run, which also makes /home/user
	// its working directory and home.
	res, err := h.opts.Execute(r.Context(), engine.Request{Principal: p, Client: "e2b", Code: setupCode,
		SessionID: id, Image: image, Env: sb.EnvVars})
	if err == nil && !res.Success {
		err = fmt.Errorf("starting the sandbox: %s", resultError(res))
	}
	if err != nil {
		_ = h.opts.Engine.DestroySession(context.WithoutCancel(r.Context()), p, id)
		var ref *engine.RefusedError
		if errors.As(err, &ref) && image == req.TemplateID && (ref.Kind == engine.RefusedNotFound || ref.Kind == engine.RefusedInvalid) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("template %q: %v. A template is a forge image (forge image ls) or custom environment (forge env ls; make one with forge env build NAME); base and code-interpreter-v1 run e2b.default_template", truncate(req.TemplateID, 100), err))
			return
		}
		h.engineError(w, r, err, "creating a sandbox of template "+strconv.Quote(truncate(req.TemplateID, 100)))
		return
	}
	if err := h.reg.put(sb); err != nil {
		_ = h.opts.Engine.DestroySession(context.WithoutCancel(r.Context()), p, id)
		h.engineError(w, r, err, "keeping the sandbox's record")
		return
	}
	h.log.Info("sandbox created", "sandbox", id, "principal", p.Tenant, "template", sb.Template, "image", image, "end_at", sb.EndAt)
	writeJSON(w, http.StatusCreated, h.reply(sb))
}

// setupCode makes /home/user (the workspace, see rootfs's skeleton) the
// working directory and home of a session's code.
const setupCode = "import os as _os\n_os.chdir('/home/user')\n_os.environ['HOME'] = '/home/user'\ndel _os\n"

func (h *Handler) reply(sb *Sandbox) sandboxReply {
	return sandboxReply{TemplateID: sb.Template, SandboxID: sb.ID, Alias: sb.Template, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: h.tokenFor(sb.Owner, sb.ID)}
}

// refusedOptions names what a create asks for that forge cannot give, and
// what to use instead.
func refusedOptions(req *newSandbox) string {
	switch {
	case req.AllowInternetAccess != nil && *req.AllowInternetAccess:
		return "allow_internet_access=true: forge sandboxes have no network; code reaches the hosts of forge's egress rules (execution.egress, server.tenants.*.egress) through its proxy. Pass allow_internet_access=False"
	case hasValue(req.Network):
		return "network: forge has no per-sandbox network rules; egress is forge's execution.egress and the tenant's server.tenants.*.egress allowlist"
	case hasValue(req.MCP):
		return "mcp: forge has no MCP gateway inside sandboxes; configure mcp_tools (code mode) and call them as Python functions"
	case hasValue(req.VolumeMounts):
		return "volumeMounts: forge sandboxes mount no volumes; each has its own /home/user (= /workspace), kept across pause and resume"
	case hasValue(req.IAM):
		return "iam: forge has no workload identities; give code its inputs as files or env vars"
	case req.AutoPause != nil && *req.AutoPause:
		return "autoPause: at its timeout a forge sandbox is killed; pause it yourself (pause()) to keep it, and connect() resumes it"
	case req.AutoResume != nil && req.AutoResume.Enabled:
		return "autoResume: a paused forge sandbox resumes on connect() or its next use; the option is not needed"
	}
	return ""
}

func hasValue(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "{}" && s != "[]"
}

func checkMap(name string, m map[string]string) string {
	if len(m) > maxEntries {
		return fmt.Sprintf("%s has %d entries; forge keeps at most %d", name, len(m), maxEntries)
	}
	for k, v := range m {
		if k == "" || len(k) > maxKeyLen || len(v) > maxValueLen || strings.ContainsRune(k+v, 0) {
			return fmt.Sprintf("%s entry %q: want a key of 1-%d bytes and a value of at most %d, without NUL", name, truncate(k, 50), maxKeyLen, maxValueLen)
		}
	}
	return ""
}

// timeout checks a requested lifetime in seconds (nil: the default).
func (h *Handler) timeout(secs *int64) (time.Duration, string) {
	if secs == nil {
		return time.Duration(h.cfg.DefaultTimeout), ""
	}
	maxT := time.Duration(h.cfg.MaxTimeout)
	if *secs <= 0 || *secs > int64(maxT/time.Second) {
		return 0, fmt.Sprintf("timeout %d s: want 1 to %d seconds (e2b.max_timeout)", *secs, int64(maxT/time.Second))
	}
	return time.Duration(*secs) * time.Second, ""
}

// templateImage maps a template name to what forge runs: the SDKs' own
// templates to e2b.default_template (or the data image when present, else
// images.default); any other name is a forge image or custom environment
// name, which the engine resolves (and refuses) at the first run.
func (h *Handler) templateImage(ctx context.Context, name string) (string, error) {
	if len(name) > 256 || strings.ContainsAny(name, "\x00\n") {
		return "", fmt.Errorf("template %q: want an image or environment name of at most 256 bytes", truncate(name, 100))
	}
	if !sdkTemplates[name] {
		return name, nil
	}
	if h.cfg.DefaultTemplate != "" {
		return h.cfg.DefaultTemplate, nil
	}
	cfg := h.opts.Config
	if cfg.Images.Data != "" {
		if imgs, err := h.opts.Engine.Images(ctx); err == nil {
			for _, im := range imgs {
				if slices.Contains(im.Names, cfg.Images.Data) {
					return cfg.Images.Data, nil
				}
			}
		}
	}
	return "", nil
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	p, sb, ok := h.owned(w, r)
	if !ok {
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	status := http.StatusOK
	if sb.Paused {
		status = http.StatusCreated // resumed
	}
	if !h.resumeAndExtend(w, r, p, sb, req.Timeout) {
		return
	}
	writeJSON(w, status, h.reply(sb))
}

// resume is v1's POST /sandboxes/{id}/resume (201; 409 when running).
func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	p, sb, ok := h.owned(w, r)
	if !ok {
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if !sb.Paused {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already running", sb.ID))
		return
	}
	if h.resumeAndExtend(w, r, p, sb, req.Timeout) {
		writeJSON(w, http.StatusCreated, h.reply(sb))
	}
}

// resumeAndExtend brings a paused sandbox's session back (restoring its
// variables and files) and, for timeout, moves its end; sb is updated.
func (h *Handler) resumeAndExtend(w http.ResponseWriter, r *http.Request, p engine.Principal, sb *Sandbox, secs *int64) bool {
	var end time.Time
	if secs != nil || sb.Paused {
		d, msg := h.timeout(secs)
		if msg != "" {
			writeError(w, http.StatusBadRequest, msg)
			return false
		}
		end = h.opts.Now().UTC().Add(d)
	}
	if sb.Paused {
		_, err := h.opts.Execute(r.Context(), engine.Request{Principal: p, Client: "e2b", Code: setupCode, SessionID: sb.ID, Env: sb.EnvVars})
		if err != nil {
			h.engineError(w, r, err, "resuming sandbox "+sb.ID)
			return false
		}
	}
	up, err := h.reg.update(sb.ID, func(s *Sandbox) {
		s.Paused = false
		if !end.IsZero() && end.After(s.EndAt) {
			s.EndAt = end
		}
	})
	if err != nil {
		h.engineError(w, r, err, "updating sandbox "+sb.ID)
		return false
	}
	*sb = *up
	return true
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	p, sb, ok := h.owned(w, r)
	if !ok {
		return
	}
	h.reg.remove(sb.ID)
	h.cmds.stopSandbox(r.Context(), sb.ID, "its sandbox was killed")
	h.ctxs.forget(sb.ID)
	err := h.opts.Engine.DestroySession(context.WithoutCancel(r.Context()), p, sb.ID)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		h.engineError(w, r, err, "killing sandbox "+sb.ID)
		return
	}
	h.log.Info("sandbox killed", "sandbox", sb.ID, "principal", p.Tenant)
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) getInfo(w http.ResponseWriter, r *http.Request) {
	_, sb, ok := h.owned(w, r)
	if !ok {
		return
	}
	d := h.detail(sb)
	d.EnvdAccessToken = h.tokenFor(sb.Owner, sb.ID)
	writeJSON(w, http.StatusOK, d)
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	_, sb, ok := h.owned(w, r)
	if !ok {
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout: want the sandbox's remaining lifetime in seconds")
		return
	}
	d, msg := h.timeout(req.Timeout)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if _, err := h.reg.update(sb.ID, func(s *Sandbox) { s.EndAt = h.opts.Now().UTC().Add(d) }); err != nil {
		h.engineError(w, r, err, "setting the timeout of sandbox "+sb.ID)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	p, sb, ok := h.owned(w, r)
	if !ok {
		return
	}
	if sb.Paused {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already paused", sb.ID))
		return
	}
	// Pausing ends the sandbox's processes; their pollers must not bring
	// the session back.
	h.cmds.stopSandbox(r.Context(), sb.ID, "its sandbox was paused")
	err := h.opts.Engine.HibernateSession(r.Context(), p, sb.ID)
	if err != nil && !errors.Is(err, session.ErrHibernated) { // idle sessions hibernate by themselves
		h.engineError(w, r, err, "pausing sandbox "+sb.ID)
		return
	}
	if _, err := h.reg.update(sb.ID, func(s *Sandbox) { s.Paused = true }); err != nil {
		h.engineError(w, r, err, "pausing sandbox "+sb.ID)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// metric is the API's SandboxMetric.
type metric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       uint64  `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      uint64  `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// metrics reports one sample, now: the session's memory (0 while it is
// hibernated) against its limit; forge keeps no history.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	p, sb, ok := h.owned(w, r)
	if !ok {
		return
	}
	list, err := h.opts.Engine.ListSessions(r.Context(), p)
	if err != nil {
		h.engineError(w, r, err, "reading the metrics of sandbox "+sb.ID)
		return
	}
	var mem uint64
	for _, s := range list {
		if s.ID == sb.ID {
			mem = s.MemoryBytes
		}
	}
	cfg := h.opts.Config
	now := h.opts.Now().UTC()
	writeJSON(w, http.StatusOK, []metric{{Timestamp: now.Format(time.RFC3339), TimestampUnix: now.Unix(),
		CPUCount: h.cpuCount(), MemUsed: mem, MemTotal: int64(cfg.Execution.DefaultMemory), DiskTotal: int64(cfg.Volumes.SessionQuota)}})
}

func (h *Handler) cpuCount() int { return max(1, int(math.Ceil(h.opts.Config.Execution.DefaultCPUs))) }

func (h *Handler) detail(sb *Sandbox) sandboxDetail {
	cfg := h.opts.Config
	state := "running"
	if sb.Paused {
		state = "paused"
	}
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return sandboxDetail{TemplateID: sb.Template, Alias: sb.Template, SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.Created.UTC().Format(time.RFC3339Nano), EndAt: sb.EndAt.UTC().Format(time.RFC3339Nano),
		EnvdVersion: EnvdVersion, CPUCount: h.cpuCount(), MemoryMB: int64(cfg.Execution.DefaultMemory) >> 20,
		DiskSizeMB: int64(cfg.Volumes.SessionQuota) >> 20, Metadata: md, State: state}
}

// listV1 is GET /sandboxes: the running sandboxes, filtered by metadata.
func (h *Handler) listV1(w http.ResponseWriter, r *http.Request) {
	p, ok := h.principal(w, r)
	if !ok {
		return
	}
	md, msg := metadataFilter(r.URL.Query().Get("metadata"))
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	out := []sandboxDetail{}
	for _, sb := range h.sandboxes(r.Context(), p) {
		if !sb.Paused && matches(sb, md) {
			out = append(out, h.detail(sb))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listV2 is GET /v2/sandboxes: filtered by state and metadata, newest
// first, paged by limit and the x-next-token header.
func (h *Handler) listV2(w http.ResponseWriter, r *http.Request) {
	p, ok := h.principal(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	md, msg := metadataFilter(q.Get("metadata"))
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	states := map[string]bool{"running": true, "paused": true}
	if s := q.Get("state"); s != "" {
		states = map[string]bool{}
		for _, st := range strings.Split(s, ",") {
			if st != "running" && st != "paused" {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want running or paused", truncate(st, 50)))
				return
			}
			states[st] = true
		}
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1 to 100", truncate(s, 50)))
			return
		}
		limit = n
	}
	var after *cursor
	if s := q.Get("nextToken"); s != "" {
		c, err := parseCursor(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "nextToken: not one this forge gave (x-next-token)")
			return
		}
		after = &c
	}
	template := q.Get("template")
	var startedAfter time.Time
	if s := q.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("startedAfter %q: want an RFC 3339 time", truncate(s, 50)))
			return
		}
		startedAfter = t
	}
	asc := q.Get("order") == "asc"
	all := h.sandboxes(r.Context(), p)
	if asc {
		slices.Reverse(all)
	}
	out := []sandboxDetail{}
	var last *Sandbox
	more := false
	for _, sb := range all {
		state := "running"
		if sb.Paused {
			state = "paused"
		}
		if !states[state] || !matches(sb, md) || (template != "" && sb.Template != template) || sb.Created.Before(startedAfter) {
			continue
		}
		if after != nil && !after.before(sb, asc) {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		out = append(out, h.detail(sb))
		last = sb
	}
	if more && last != nil {
		w.Header().Set("X-Next-Token", cursor{Created: last.Created, ID: last.ID}.String())
	}
	writeJSON(w, http.StatusOK, out)
}

// cursor is a position in a listing (x-next-token): after the sandbox
// created at Created with ID.
type cursor struct {
	Created time.Time
	ID      string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.Created.UTC().Format(time.RFC3339Nano) + "|" + c.ID))
}

func parseCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, err
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok {
		return cursor{}, errors.New("no separator")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	return cursor{Created: t, ID: id}, err
}

// before reports whether sb comes after c in the listing's order (newest
// first, or oldest first when asc; ties by id).
func (c cursor) before(sb *Sandbox, asc bool) bool {
	if !sb.Created.Equal(c.Created) {
		return sb.Created.Before(c.Created) != asc
	}
	if asc {
		return sb.ID < c.ID
	}
	return sb.ID > c.ID
}

// metadataFilter parses the metadata query (key=value pairs, URL-encoded
// once more by the SDKs).
func metadataFilter(s string) (map[string]string, string) {
	if s == "" {
		return nil, ""
	}
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, fmt.Sprintf("metadata %q: want URL-encoded key=value pairs", truncate(s, 100))
	}
	out := map[string]string{}
	for k, v := range vals {
		k, _ = url.QueryUnescape(k)
		val, _ := url.QueryUnescape(v[0])
		out[k] = val
	}
	return out, ""
}

func matches(sb *Sandbox, md map[string]string) bool {
	for k, v := range md {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// sandboxes are p's records, newest first, without those whose session is
// gone (destroyed by forge's own tools or its session reaper).
func (h *Handler) sandboxes(ctx context.Context, p engine.Principal) []*Sandbox {
	recs := h.reg.list(p.Tenant)
	list, err := h.opts.Engine.ListSessions(ctx, p)
	if err != nil {
		return recs
	}
	live := map[string]bool{}
	for _, s := range list {
		live[s.ID] = true
	}
	out := recs[:0]
	for _, sb := range recs {
		if live[sb.ID] {
			out = append(out, sb)
		} else {
			h.reg.remove(sb.ID)
		}
	}
	return out
}

// owned authenticates a control-plane request and finds the principal's
// sandbox {id}, writing the 404 itself.
func (h *Handler) owned(w http.ResponseWriter, r *http.Request) (engine.Principal, *Sandbox, bool) {
	p, ok := h.principal(w, r)
	if !ok {
		return p, nil, false
	}
	id := r.PathValue("id")
	sb, ok := h.reg.owned(p, id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", truncate(id, 80)))
		return p, nil, false
	}
	return p, sb, true
}

// decodeBody decodes an optional JSON body into v, writing the 400.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxControlBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return false
	}
	if len(b) > maxControlBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", maxControlBody))
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return true
	}
	if err := json.Unmarshal(b, v); err != nil {
		writeError(w, http.StatusBadRequest, "the request body is not the JSON object expected: "+err.Error())
		return false
	}
	return true
}

// engineError answers an error of the engine or the tenant gate with the
// status the SDKs turn into the right exception.
func (h *Handler) engineError(w http.ResponseWriter, r *http.Request, err error, what string) {
	var ref *engine.RefusedError
	status, retry := rest.StatusOf(err)
	switch {
	case errors.As(err, &ref) && ref.Kind == engine.RefusedBusy:
		status, retry = http.StatusConflict, 0 // the SDKs' answer to a sandbox in use
	case status != 0:
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	default:
		status = http.StatusInternalServerError
		h.log.Error(what, "err", err, "request_id", rest.RequestID(r.Context()))
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
	}
	writeError(w, status, what+": "+err.Error())
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
