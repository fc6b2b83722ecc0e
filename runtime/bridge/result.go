package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// maxErrorMessage caps a tool's error message passed into the sandbox.
const maxErrorMessage = 16 << 10

// convertResult turns a tool result into the compact JSON value the sandbox
// receives: structuredContent when present, else the text content parsed
// as JSON, else the text (several content items become a list). A result
// with isError becomes a tool error carrying the text.
func convertResult(t Tool, res *mcp.CallToolResult, limit int64) (json.RawMessage, error) {
	if res.IsError {
		msg := strings.TrimSpace(contentText(res.Content))
		if msg == "" {
			msg = "the tool reported an error without a message"
		}
		if len(msg) > maxErrorMessage {
			msg = msg[:maxErrorMessage] + "…"
		}
		return nil, &callError{kindToolError, msg}
	}
	value, err := resultValue(res)
	if err != nil {
		return nil, &callError{kindToolError, fmt.Sprintf("tool %q returned a result that is not valid JSON", t.Name)}
	}
	if int64(len(value)) > limit {
		return nil, &callError{kindLimit, fmt.Sprintf("the response of tool %q is %d bytes, over the limit of %d bytes (mcp_tools.%s.max_response_size)",
			t.Name, len(value), limit, t.Server)}
	}
	return value, nil
}

func resultValue(res *mcp.CallToolResult) (json.RawMessage, error) {
	switch raw := bytes.TrimSpace(res.RawStructuredContent); {
	case len(raw) > 0 && !bytes.Equal(raw, []byte("null")):
		return compact(raw)
	case res.StructuredContent != nil:
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, err
		}
		return compact(b)
	}
	switch len(res.Content) {
	case 0:
		return json.RawMessage("null"), nil
	case 1:
		return contentValue(res.Content[0])
	}
	items := make([]json.RawMessage, len(res.Content))
	for i, c := range res.Content {
		v, err := contentValue(c)
		if err != nil {
			return nil, err
		}
		items[i] = v
	}
	return json.Marshal(items)
}

// contentValue is a text item as parsed JSON or a string; any other item
// (image, audio, resource) as its MCP JSON object.
func contentValue(c mcp.Content) (json.RawMessage, error) {
	text, ok := c.(mcp.TextContent)
	if !ok {
		if p, isPtr := c.(*mcp.TextContent); isPtr {
			text, ok = *p, true
		}
	}
	if !ok {
		b, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		return compact(b)
	}
	if t := strings.TrimSpace(text.Text); json.Valid([]byte(t)) {
		return compact([]byte(t))
	}
	return json.Marshal(text.Text)
}

// compact makes a JSON value one line (the reply is a line).
func compact(b []byte) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func contentText(content []mcp.Content) string {
	var parts []string
	for _, c := range content {
		switch t := c.(type) {
		case mcp.TextContent:
			parts = append(parts, t.Text)
		case *mcp.TextContent:
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}
