package rest

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDocument(t *testing.T) {
	api, err := New(Options{Version: "1.2.3",
		ExecuteSchema: json.RawMessage(`{"type": "object", "properties": {"code": {"type": "string"}}, "x-marker": "execute-in"}`),
		ResultSchema:  json.RawMessage(`{"type": "object", "x-marker": "execute-out"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Info    struct{ Version string }             `json:"info"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(api.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != "1.2.3" {
		t.Errorf("openapi %q version %q", doc.OpenAPI, doc.Info.Version)
	}
	for path, methods := range map[string]string{
		"/healthz": "get", "/readyz": "get", "/api/v1/version": "get", "/api/v1/execute": "post",
		"/api/v1/sandboxes": "get post", "/api/v1/sandboxes/{id}": "delete",
		"/api/v1/sessions/{id}/state": "get post", "/api/v1/sessions/{id}/files": "get",
		"/api/v1/sessions/{id}/files/{path}": "get put delete",
	} {
		for _, m := range strings.Fields(methods) {
			if doc.Paths[path][m] == nil {
				t.Errorf("no %s %s in the document", m, path)
			}
		}
	}
	for p := range doc.Paths {
		if strings.Contains(p, "...") {
			t.Errorf("Go wildcard left in path %q", p)
		}
	}
	raw := string(api.Document())
	for _, marker := range []string{"execute-in", "execute-out", "request_id", "bearer"} {
		if !strings.Contains(raw, marker) {
			t.Errorf("the document lacks %q", marker)
		}
	}
}
