package rest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// document renders huma's OpenAPI document with two changes: /execute
// shows execute_python's own input and output schemas (one schema for
// both faces), and Go's "{path...}" wildcard is shown as "{path}".
func (a *API) document() ([]byte, error) {
	raw, err := json.Marshal(a.api.OpenAPI())
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	paths, _ := doc["paths"].(map[string]any)
	for p, v := range paths {
		if strings.Contains(p, "...}") {
			delete(paths, p)
			paths[strings.ReplaceAll(p, "...}", "}")] = v
		}
	}
	var in, out any
	if err := json.Unmarshal(a.opts.ExecuteSchema, &in); err != nil {
		return nil, fmt.Errorf("execute schema: %w", err)
	}
	if err := json.Unmarshal(a.opts.ResultSchema, &out); err != nil {
		return nil, fmt.Errorf("result schema: %w", err)
	}
	post := dig(paths, Prefix+"/execute", "post")
	setSchema(dig(post, "requestBody", "content", "application/json"), in)
	setSchema(dig(post, "responses", "200", "content", "application/json"), out)
	return json.MarshalIndent(doc, "", "  ")
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, _ := m[k].(map[string]any)
		if next == nil {
			return nil
		}
		m = next
	}
	return m
}

func setSchema(mediaType map[string]any, schema any) {
	if mediaType != nil {
		mediaType["schema"] = schema
	}
}
