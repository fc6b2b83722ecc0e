package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

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
