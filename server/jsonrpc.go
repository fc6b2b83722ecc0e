package server

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-forge/forge/runtime/engine"
)

// messageKind is what a checked JSON-RPC message is.
type messageKind int

const (
	kindRequest messageKind = iota
	kindNotification
	kindResponse // to a request forge sent (elicitation over stdio)
)

// message is the envelope of one checked JSON-RPC message.
type message struct {
	kind   messageKind
	id     any // string or number for requests and responses
	method string
	params json.RawMessage
}

// checkMessage classifies one JSON-RPC message the way both transports
// answer it (JSON-RPC 2.0 section 5.1, MCP's rules on ids):
//   - not JSON at all, or nested deeper than the decoder allows: -32700
//     Parse error, id null;
//   - JSON but not a request, notification or response object (a number, an
//     array such as a batch, which MCP does not have, an id that is neither
//     a string nor a number, a missing or empty method, a wrong "jsonrpc"):
//     -32600 Invalid Request, with the id when it can be read, else null;
//   - a response (no method; result or error) goes to the request forge
//     sent, if one waits for it (ServeStdio); nothing else is ignored.
//
// reply is nil when the message is to be handled (or, for a response,
// ignored).
func checkMessage(raw []byte) (msg message, reply mcp.JSONRPCMessage) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		if !json.Valid(raw) {
			return msg, mcp.NewJSONRPCError(mcp.NewRequestId(nil), mcp.PARSE_ERROR, "Parse error: the message is not valid JSON (or nests too deeply)", nil)
		}
		return msg, invalidRequest(nil, "want a JSON-RPC request object (batches are not supported)")
	}
	if fields == nil { // the JSON literal null
		return msg, invalidRequest(nil, "want a JSON-RPC request object, got null")
	}
	rawID, hasID := fields["id"]
	idOK := hasID && decodeID(rawID, &msg.id)
	if hasID && !idOK && !isNull(rawID) {
		return msg, invalidRequest(nil, "id must be a string or a number")
	}
	var version string
	if json.Unmarshal(fields["jsonrpc"], &version) != nil || version != mcp.JSONRPC_VERSION {
		return msg, invalidRequest(msg.id, `"jsonrpc" must be "2.0"`)
	}
	rawMethod, hasMethod := fields["method"]
	if !hasMethod {
		_, hasResult := fields["result"]
		_, hasError := fields["error"]
		if hasResult != hasError && (idOK || hasError && hasID) {
			msg.kind = kindResponse
			return msg, nil
		}
		return msg, invalidRequest(msg.id, `want a request with a "method" (or a response with an id and either "result" or "error")`)
	}
	if json.Unmarshal(rawMethod, &msg.method) != nil || msg.method == "" {
		return msg, invalidRequest(msg.id, `"method" must be a non-empty string`)
	}
	if p, ok := fields["params"]; ok && !isNull(p) {
		if c := firstByte(p); c != '{' && c != '[' {
			return msg, invalidRequest(msg.id, `"params" must be an object or an array`)
		}
		msg.params = p
	}
	switch {
	case !hasID:
		msg.kind = kindNotification
	case !idOK: // "id": null
		return msg, invalidRequest(nil, "id must be a string or a number, not null (MCP)")
	default:
		msg.kind = kindRequest
	}
	return msg, nil
}

func invalidRequest(id any, why string) mcp.JSONRPCMessage {
	return mcp.NewJSONRPCError(mcp.NewRequestId(id), mcp.INVALID_REQUEST, "Invalid Request: "+why, nil)
}

// decodeID reads a string or number id.
func decodeID(raw json.RawMessage, id *any) bool {
	switch firstByte(raw) {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			*id = s
			return true
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			if i, err := n.Int64(); err == nil {
				*id = i
			} else {
				f, _ := n.Float64()
				*id = f
			}
			return true
		}
	}
	return false
}

func firstByte(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// preflight runs the checks a request passes between checkMessage and
// mcp-go, the same for every transport (HandleMessage and ServeStdio over
// stdio, precheckHTTP over HTTP), in this order:
//
//  1. waitHosted: tools/list, tools/call, resources/list and resources/read
//     wait while the hosted tools load, since their answers depend on them;
//  2. openSaved: tools/list, tools/call and resources/read open the
//     caller's saved tools, so that mcp-go finds them in this very request;
//  3. tools/list is marked as a listing (scopeFilter filters by scope
//     there only);
//  4. tools/call (checkCall): params' name and arguments are decoded once;
//     a forge tool's arguments are then decoded into their typed value,
//     which rides along in the returned context to the handler (argsOf),
//     and a hosted tool's are checked against its inputSchema (checkHosted).
//     Arguments that do not fit are answered with invalid params (-32602):
//     mcp-go would report a handler's error as an internal error.
//
// A reply that is not nil is the answer, and mcp-go does not see the
// request; drop says ctx ended while it waited (the client went away or
// forge stops), and the request gets no answer. Notifications and
// responses pass unchecked.
func (s *Server) preflight(ctx context.Context, msg message) (_ context.Context, reply mcp.JSONRPCMessage, drop bool) {
	if msg.kind != kindRequest {
		return ctx, nil, false
	}
	if reply, drop := s.waitHosted(ctx, msg); reply != nil || drop {
		return ctx, reply, drop
	}
	switch msg.method {
	case string(mcp.MethodToolsList):
		s.openSaved(ctx, s.principal(ctx))
		return context.WithValue(ctx, listingKey{}, true), nil, false
	case string(mcp.MethodResourcesRead):
		s.openSaved(ctx, s.principal(ctx))
	case string(mcp.MethodToolsCall):
		s.openSaved(ctx, s.principal(ctx))
		return s.checkCall(ctx, msg)
	}
	return ctx, nil, false
}

// toolCall is what preflight reads of a tools/call's params, once: the
// tool's name and its arguments, left raw for the tool's own decoder
// (decodeArgs) or schema (checkHosted).
type toolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// checkCall is step 4 of preflight.
func (s *Server) checkCall(ctx context.Context, msg message) (context.Context, mcp.JSONRPCMessage, bool) {
	var call toolCall
	if json.Unmarshal(msg.params, &call) != nil {
		return ctx, nil, false // mcp-go answers a malformed params object
	}
	d, err := decodeArgs(call.Name, call.Arguments)
	switch {
	case err != nil:
		return ctx, mcp.NewJSONRPCError(mcp.NewRequestId(msg.id), mcp.INVALID_PARAMS, err.Error(), nil), false
	case d != nil:
		return context.WithValue(ctx, decodedArgsKey{}, d), nil, false
	}
	return ctx, s.checkHosted(ctx, msg.id, call), false
}

// decodedArgs are the arguments of one call of a forge tool, decoded once
// on the way in (preflight) and handed to the tool's handler through the
// context.
type decodedArgs struct {
	tool    string
	execute ExecuteArgs
	session sessionArgs
	build   BuildArgs
}

type decodedArgsKey struct{}

// decodeArgs decodes the arguments of tool; nil, nil for a tool that is
// not forge's.
func decodeArgs(tool string, raw []byte) (*decodedArgs, error) {
	d := &decodedArgs{tool: tool}
	var err error
	switch tool {
	case toolExecute:
		d.execute, err = DecodeExecuteArgs(raw)
	case toolBuild:
		d.build, err = DecodeBuildArgs(raw)
	case toolDocumentState, toolListSessions, toolDestroySession, toolForkSession, toolWriteFile, toolReadFile, toolListFiles:
		d.session, err = decodeSessionArgs(tool, raw)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// argsOf returns the decoded arguments of req: those preflight decoded, or,
// for a caller that bypassed HandleMessage (an in-process client of
// MCPServer), decoded here from mcp-go's copy of the raw arguments.
func argsOf(ctx context.Context, req mcp.CallToolRequest) (*decodedArgs, error) {
	if d, ok := ctx.Value(decodedArgsKey{}).(*decodedArgs); ok && d.tool == req.Params.Name {
		return d, nil
	}
	raw := req.Params.RawArguments
	if len(raw) == 0 && req.Params.Arguments != nil {
		var err error
		if raw, err = json.Marshal(req.Params.Arguments); err != nil {
			return nil, argError("", err.Error())
		}
	}
	return decodeArgs(req.Params.Name, raw)
}

type principalKey struct{}

// withPrincipal marks ctx as acting for p; the transports call it.
func withPrincipal(ctx context.Context, p engine.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principal is who a call acts for: what the transport put into ctx, else
// (an in-process client) Options.Principal, else the local principal.
func (s *Server) principal(ctx context.Context) engine.Principal {
	if p, ok := ctx.Value(principalKey{}).(engine.Principal); ok {
		return p
	}
	if s.opts.Principal.Tenant != "" {
		return s.opts.Principal
	}
	return engine.LocalPrincipal
}
