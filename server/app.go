package server

import (
	"context"
	_ "embed"

	"github.com/mark3labs/mcp-go/mcp"
)

// The MCP App (the MCP Apps extension, SEP-1865) that renders an
// execute_python result for the person: stdout/stderr panes, zoomable
// images, sortable DataFrame tables, errors with tracebacks. Hosts that
// support Apps find it through execute_python's _meta.ui.resourceUri and
// hand it the tool result; other clients never read it and get the same
// content as before.
const (
	uriResultApp  = "ui://forge/result.html"
	mimeMCPApp    = "text/html;profile=mcp-app"
	resultAppName = "execute-python-result"
)

//go:embed app/result.html
var resultAppHTML string

// appToolMeta links a tool to the result App.
func appToolMeta() *mcp.Meta {
	return mcp.NewMetaFromMap(map[string]any{"ui": map[string]any{"resourceUri": uriResultApp}})
}

func (s *Server) addResultApp() {
	r := mcp.NewResource(uriResultApp, resultAppName,
		mcp.WithResourceDescription("An MCP App that shows an execute_python result: output panes, zoomable figures, sortable tables, tracebacks."),
		mcp.WithMIMEType(mimeMCPApp))
	s.mcp.AddResource(r, func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uriResultApp, MIMEType: mimeMCPApp, Text: resultAppHTML}}, nil
	})
}
