package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/mcp-forge/forge/runtime/kernel"
)

// A plot's bytes appear once, as ImageContent; structuredContent refers to
// it by index and MIME type.
func TestStructuredImagesByReference(t *testing.T) {
	png := strings.Repeat("iVBORw0KGgo=", 20000) // 240 KB of base64
	r := renderResult(&kernel.Result{Success: true, Stdout: "ok\n", Display: []kernel.Display{
		{MimeType: "image/png", Data: png}, {MimeType: "text/html", Data: strings.Repeat("<td>x</td>", 1000)},
		{MimeType: "text/plain", Data: "df"}, {MimeType: "image/png", Data: png}}})
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 8<<10 || strings.Contains(string(b), "iVBORw0KGgo") {
		t.Fatalf("structured content of %d bytes (want < 8 KiB, without image bytes): %.300s", len(b), b)
	}
	sc := r.StructuredContent.(*compactResult)
	if len(sc.Display) != 4 {
		t.Fatalf("got %d display refs, want 4", len(sc.Display))
	}
	for _, i := range []int{0, 3} {
		ref := sc.Display[i]
		if ref.Content == nil || ref.Data != "" || ref.Bytes != len(png) {
			t.Fatalf("display %d: got %+v, want a reference without data", i, ref)
		}
		img, ok := r.Content[*ref.Content].(mcp.ImageContent)
		if !ok || img.Data != png {
			t.Errorf("display %d points at content %d = %T, want the image", i, *ref.Content, r.Content[*ref.Content])
		}
	}
	if html := sc.Display[1]; !html.Truncated || len(html.Data) > structDisplayTextCap+len("…") {
		t.Errorf("got html ref of %d bytes (truncated %v), want it capped at %d", len(html.Data), html.Truncated, structDisplayTextCap)
	}
	if sc.Display[2].Data != "df" {
		t.Errorf("got text/plain %q, want df", sc.Display[2].Data)
	}
}

// The structured result has a bound whatever the run produced, and keeps
// what a model needs: the ends of stdout and of the traceback.
func TestStructuredBound(t *testing.T) {
	big := strings.Repeat("é", 1<<20)
	var disp []kernel.Display
	for range 1000 {
		disp = append(disp, kernel.Display{MimeType: "text/html", Data: big[:10000]})
	}
	var notes []string
	for range 100 {
		notes = append(notes, big[:5000])
	}
	id := "s1"
	r := renderCompact(&kernel.Result{
		Stdout: big + "LAST-LINE", Stderr: big, Result: big, Display: disp, Notes: notes, SessionID: &id,
		Error: &kernel.ExecError{Type: strings.Repeat("E", 1000), Message: big, Traceback: big + "ValueError: the end"},
	}, []outputFile{{Stream: "stdout", Path: spillDir + "/x-stdout.txt", Bytes: len(big), URI: "forge://sessions/s1/files/x"}})
	b, _ := json.Marshal(r.StructuredContent)
	if len(b) > maxStructuredBytes {
		t.Errorf("structured content of %d bytes, over the bound of %d", len(b), maxStructuredBytes)
	}
	sc := r.StructuredContent.(*compactResult)
	if !strings.HasSuffix(sc.Stdout, "LAST-LINE") || !strings.Contains(sc.Stdout, "bytes omitted") {
		t.Errorf("stdout lost its end or its marker: …%s", sc.Stdout[len(sc.Stdout)-40:])
	}
	if !strings.HasSuffix(sc.Error.Traceback, "ValueError: the end") {
		t.Errorf("traceback lost its end")
	}
	if !sc.Truncated || sc.DisplayOmitted != 1000-structMaxDisplay {
		t.Errorf("got truncated %v, display_omitted %d, want true, %d", sc.Truncated, sc.DisplayOmitted, 1000-structMaxDisplay)
	}
	var link *mcp.ResourceLink
	for _, c := range r.Content {
		if l, ok := c.(mcp.ResourceLink); ok {
			link = &l
		}
	}
	if link == nil || !strings.Contains(link.Description, "read_file") {
		t.Errorf("no resource_link to the saved stdout in %d contents", len(r.Content))
	}
	if !strings.Contains(strings.Join(sc.Notes, "\n"), "/workspace/"+spillDir) {
		t.Errorf("notes do not say where stdout was saved: %q", sc.Notes)
	}
}

// compactResult embeds kernel.Result for the fields they share: its JSON is
// exactly the outputSchema's, every property present for a full result (so
// none is lost or renamed, and kernel.Result's base64 display, which the
// compact one shadows, never appears), and valid against the schema.
func TestStructuredMatchesOutputSchema(t *testing.T) {
	id := "s1"
	r := &kernel.Result{Success: false, Stdout: "out", Stderr: "err", Result: 3,
		Display: []kernel.Display{{MimeType: "image/png", Data: "iVBORw0KGgo="}, {MimeType: "text/html", Data: "<b>x</b>"}},
		Error:   &kernel.ExecError{Type: "ValueError", Message: "m", Traceback: "tb", Line: 2}, ExitCode: 1,
		TimedOut: true, OOMKilled: true, Truncated: true, ExecutionTimeMS: 1.5, MemoryPeakBytes: 7, SessionID: &id,
		Notes: []string{"n"}, Variables: 4}
	sc := compact(r, []outputFile{{Stream: "stdout", Path: "p", Bytes: 9, URI: "u"}})
	sc.DisplayOmitted = 1
	b, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var schema struct{ Properties map[string]any }
	if err := json.Unmarshal(outputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	for k := range schema.Properties {
		if _, ok := got[k]; !ok {
			t.Errorf("structuredContent lacks %q: %s", k, b)
		}
	}
	for k := range got {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("structuredContent has %q, which outputSchema does not declare: %s", k, b)
		}
	}
	if strings.Contains(string(b), "iVBORw0KGgo=") {
		t.Errorf("structuredContent carries the image's bytes: %s", b)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(outputSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("output.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("output.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []*kernel.Result{r, {Success: true}} {
		b, _ := json.Marshal(compact(res, nil))
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("structuredContent %s does not validate against outputSchema: %v", b, err)
		}
	}
}
