// Package wire is the initialize handshake's bytes on forge's side: which
// requests forge answers before its server runs (Parse), and the reply it
// sends (Reply), as the server's stdio loop would encode mcp-go's
// initialize result. It imports no configuration, so that `forge serve` can
// use it from one of its first initializers (cmd/forge/internal/early);
// server/hello fills in what the configuration says.
package wire

import (
	"encoding/json"
	"errors"
)

// Title is the server's human-readable name (serverInfo.title).
const Title = "forge: sandboxed Python"

// Capabilities is what server.New enables on its mcp-go server: tools with
// list-changed notifications (hosted tools change at reloads), resources,
// logging. The server's tests compare it with mcp-go's own.
var Capabilities = json.RawMessage(`{"logging":{},"resources":{},"tools":{"listChanged":true}}`)

// legacyVersions are the protocol revisions that begin with initialize,
// newest first, as mcp-go negotiates them (mcp.NegotiateLegacyVersion).
var legacyVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// NegotiateVersion is the protocol version an initialize result reports for
// the one the client asked for: that one when it begins with initialize,
// 2025-03-26 when none was given, else the newest that does.
func NegotiateVersion(requested string) string {
	if requested == "" {
		return "2025-03-26"
	}
	for _, v := range legacyVersions {
		if v == requested {
			return v
		}
	}
	return legacyVersions[0]
}

// Request is an initialize request as the early reply takes it: nothing
// that forge's stdio loop would answer otherwise (see Parse).
type Request struct {
	ID              json.RawMessage // a JSON number or string, as sent
	ProtocolVersion string
}

// ErrNotInitialize is Parse's answer for every line that is not a plain
// initialize request: the server answers it instead.
var ErrNotInitialize = errors.New("not a plain initialize request")

// Parse takes a line that is an initialize request with a string or integer
// id, "jsonrpc": "2.0" and a params object, and nothing else at the top
// level; anything else (a notification, another method, an id of another
// type, duplicate or extra members) is ErrNotInitialize, left to the
// server.
func Parse(line []byte) (Request, error) {
	var top map[string]json.RawMessage
	if json.Unmarshal(line, &top) != nil || len(top) != 4 {
		return Request{}, ErrNotInitialize
	}
	var version, method string
	if json.Unmarshal(top["jsonrpc"], &version) != nil || version != "2.0" ||
		json.Unmarshal(top["method"], &method) != nil || method != "initialize" {
		return Request{}, ErrNotInitialize
	}
	id := top["id"]
	if !plainID(id) {
		return Request{}, ErrNotInitialize
	}
	var params struct {
		ProtocolVersion *string `json:"protocolVersion"`
	}
	p := top["params"]
	if len(p) == 0 || p[0] != '{' || json.Unmarshal(p, &params) != nil || params.ProtocolVersion == nil {
		return Request{}, ErrNotInitialize
	}
	return Request{ID: id, ProtocolVersion: *params.ProtocolVersion}, nil
}

// plainID: an integer of at most 15 digits (it survives a float64) or a
// string of printable ASCII without escapes, so that echoing its bytes is
// what re-encoding the decoded id gives.
func plainID(id json.RawMessage) bool {
	switch {
	case len(id) >= 2 && id[0] == '"' && id[len(id)-1] == '"':
		for _, c := range id[1 : len(id)-1] {
			if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
		}
		return true
	case len(id) >= 1 && len(id) <= 15:
		for i, c := range id {
			if (c < '0' || c > '9') && !(i == 0 && c == '-' && len(id) > 1) {
				return false
			}
		}
		return len(id) == 1 || id[0] != '0' && !(id[0] == '-' && id[1] == '0')
	}
	return false
}

// Reply is the line (with its newline) that answers req, as the server's
// stdio loop writes mcp-go's initialize result: the server is name at
// version, with instructions.
func Reply(req Request, name, version, instructions string) ([]byte, error) {
	type implementation struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Title   string `json:"title,omitempty"`
	}
	type result struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ServerInfo      implementation  `json:"serverInfo"`
		Instructions    string          `json:"instructions,omitempty"`
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  result          `json:"result"`
	}{"2.0", req.ID, result{
		ProtocolVersion: NegotiateVersion(req.ProtocolVersion),
		Capabilities:    Capabilities,
		ServerInfo:      implementation{Name: name, Version: version, Title: Title},
		Instructions:    instructions,
	}})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
