package rest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
)

// Problem is an RFC 9457 problem detail with the request's id, the one
// the logs and the audit log show.
type Problem struct {
	Type      string              `json:"type,omitempty" doc:"URI of the problem type; about:blank when only the status says it."`
	Title     string              `json:"title,omitempty" doc:"Short summary of the status."`
	Status    int                 `json:"status,omitempty" doc:"HTTP status code."`
	Detail    string              `json:"detail,omitempty" doc:"What was wrong, the setting involved and what is allowed."`
	Instance  string              `json:"instance,omitempty" doc:"urn:forge:request:<request_id>."`
	RequestID string              `json:"request_id" doc:"Id of the request in forge's logs and audit log."`
	Errors    []*huma.ErrorDetail `json:"errors,omitempty" doc:"Field-level details."`

	headers http.Header
}

func (p *Problem) Error() string { return p.Detail }

// GetStatus implements huma.StatusError.
func (p *Problem) GetStatus() int { return p.Status }

// ContentType implements huma.ContentTypeFilter.
func (p *Problem) ContentType(string) string { return "application/problem+json" }

// GetHeaders implements huma.HeadersError (Retry-After).
func (p *Problem) GetHeaders() http.Header { return p.headers }

// NewProblem is a problem for the request in ctx.
func NewProblem(ctx context.Context, status int, detail string) *Problem {
	id := RequestID(ctx)
	p := &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, RequestID: id}
	if id != "" {
		p.Instance = "urn:forge:request:" + id
	}
	return p
}

// WithRetryAfter adds a Retry-After header of secs (at least 1).
func (p *Problem) WithRetryAfter(secs int) *Problem {
	if p.headers == nil {
		p.headers = http.Header{}
	}
	p.headers.Set("Retry-After", strconv.Itoa(max(secs, 1)))
	return p
}

// Write sends p outside huma (the auth layer, the body limit).
func (p *Problem) Write(w http.ResponseWriter) {
	for k, v := range p.headers {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func init() {
	// Every error huma makes itself (a malformed body, a bad parameter)
	// becomes a Problem with the request id, like forge's own.
	huma.NewErrorWithContext = func(hctx huma.Context, status int, msg string, errs ...error) huma.StatusError {
		var ctx context.Context = context.Background()
		if hctx != nil {
			ctx = hctx.Context()
		}
		p := NewProblem(ctx, status, msg)
		for _, e := range errs {
			if e == nil {
				continue
			}
			if d, ok := e.(huma.ErrorDetailer); ok {
				p.Errors = append(p.Errors, d.ErrorDetail())
			} else {
				p.Errors = append(p.Errors, &huma.ErrorDetail{Message: e.Error()})
			}
		}
		return p
	}
}

type requestIDKey struct{}

// HeaderRequestID carries the request id both ways.
const HeaderRequestID = "X-Request-Id"

// WithRequestID marks ctx with the request's id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the id of the request in ctx ("" outside a request).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// NewRequestID returns a fresh random id. Clients' own ids are not
// trusted: they would let one request pose as another in the audit log.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
