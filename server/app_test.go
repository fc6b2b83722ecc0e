package server

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// execute_python names the result App in _meta.ui.resourceUri (the MCP
// Apps extension) and the App reads back as an MCP App resource.
func TestResultAppLinked(t *testing.T) {
	c := connect(t, New(newStub(), Options{Version: "test"}))
	tools, err := c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var uri any
	for _, tl := range tools.Tools {
		if tl.Name == toolExecute && tl.Meta != nil {
			if ui, ok := tl.Meta.AdditionalFields["ui"].(map[string]any); ok {
				uri = ui["resourceUri"]
			}
		}
	}
	if uri != uriResultApp {
		t.Fatalf("execute_python _meta.ui.resourceUri = %v, want %s", uri, uriResultApp)
	}
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uriResultApp
	res, err := c.ReadResource(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := res.Contents[0].(mcp.TextResourceContents)
	if !ok || got.MIMEType != "text/html;profile=mcp-app" || !strings.Contains(got.Text, "ui/notifications/tool-result") {
		t.Errorf("App resource: mime %q, %d bytes; want an MCP App page", got.MIMEType, len(got.Text))
	}
	// Self-contained: nothing loaded from elsewhere.
	for _, ref := range []string{"src=\"http", "href=\"http", "@import", "<link"} {
		if strings.Contains(got.Text, ref) {
			t.Errorf("App page refers to something outside itself: %q", ref)
		}
	}
}
