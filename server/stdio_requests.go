package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// maxClientResult bounds the result of a request forge sent to a stdio
// client (an elicitation's answer is a few bytes; its content is unused).
const maxClientResult = 64 << 10

// stdioReply is a client's response to a request forge sent over stdio.
type stdioReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// RequestElicitation sends elicitation/create to the stdio client and waits
// for its answer (mcpserver.SessionWithElicitation): forge's own stdio loop
// routes responses back by id (see deliver).
func (s *stdioSession) RequestElicitation(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	raw, err := s.request(ctx, string(mcp.MethodElicitationCreate), req.Params)
	if err != nil {
		return nil, err
	}
	var res mcp.ElicitationResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("elicitation/create: the client's result: %w", err)
	}
	return &res, nil
}

// request sends one request to the client and waits for its result.
func (s *stdioSession) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	s.mu.Lock()
	out := s.out
	if out == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: the stdio session is not serving", method)
	}
	s.lastID++
	id := "forge-" + strconv.FormatInt(s.lastID, 10)
	ch := make(chan stdioReply, 1)
	if s.pending == nil {
		s.pending = map[string]chan stdioReply{}
	}
	s.pending[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	out.write(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "id": id, "method": method, "params": params})
	select {
	case r := <-ch:
		if r.Error != nil {
			return nil, fmt.Errorf("%s: the client answered error %d: %.200s", method, r.Error.Code, r.Error.Message)
		}
		if len(r.Result) > maxClientResult {
			return nil, fmt.Errorf("%s: the client's result is %d bytes, over %d", method, len(r.Result), maxClientResult)
		}
		return r.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: waiting for the client: %w", method, ctx.Err())
	}
}

// deliver hands a response line to the request that waits for it; a
// response to nothing forge asked (or asked and gave up on) is dropped.
func (s *stdioSession) deliver(id any, line []byte) {
	key, ok := id.(string)
	if !ok {
		return
	}
	s.mu.Lock()
	ch := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if ch == nil {
		return
	}
	var r stdioReply
	if err := json.Unmarshal(line, &r); err != nil {
		return
	}
	if r.Result == nil && r.Error == nil {
		r.Result = json.RawMessage("null")
	}
	ch <- r
}

// deliverReply routes a response read by ServeStdio to its session.
func deliverReply(ctx context.Context, msg message, line []byte) {
	if sess, ok := mcpserver.ClientSessionFromContext(ctx).(*stdioSession); ok {
		sess.deliver(msg.id, line)
	}
}
