package kernel

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
)

// request is one line to the agent; Op selects which fields matter.
type request struct {
	ID          uint64   `json:"id"`
	Op          string   `json:"op"`
	Code        *string  `json:"code,omitempty"`
	OutputLimit int      `json:"output_limit,omitempty"`
	WarmImports []string `json:"warm_imports,omitempty"`
	Modules     []string `json:"modules,omitempty"`
	Path        string   `json:"path,omitempty"`
	Data        *string  `json:"data,omitempty"`
	MaxBytes    int      `json:"max_bytes,omitempty"`
}

// reply is the union of every line the agent sends.
type reply struct {
	// hello
	Op       string          `json:"op"`
	Python   string          `json:"python"`
	PID      int             `json:"pid"`
	Modules  map[string]bool `json:"modules"`
	StrayFDs int             `json:"stray_fds"`

	// every reply
	ID    *uint64    `json:"id"`
	OK    *bool      `json:"ok"`
	Error *ExecError `json:"error"` // exec: the user's exception; ok:false: why

	// exec
	Stdout    string          `json:"stdout"`
	Stderr    string          `json:"stderr"`
	Truncated bool            `json:"truncated"`
	Result    json.RawMessage `json:"result"`
	Display   []Display       `json:"display"`
	value     any             // Result decoded, numbers as json.Number

	Variables []Variable `json:"variables"` // inspect
	Pong      bool       `json:"pong"`      // ping
	Count     int        `json:"count"`     // exec: user variables afterwards
	Imported  []string   `json:"imported"`  // warm
	Saved     []string   `json:"saved"`     // pickle_state
	Restored  []string   `json:"restored"`  // restore_state
	Failed    []string   `json:"failed"`    // pickle_state, restore_state
	Data      string     `json:"data"`      // read_file
	Size      int64      `json:"size"`      // read_file, write_file
	Files     []FileInfo `json:"files"`     // list_files
}

const maxMimeType = 100

// decodeReply parses one line from the agent. Any error wraps ErrProtocol.
func decodeReply(line []byte) (*reply, error) {
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, protocolErrorf(err, "decoding reply")
	}
	if r.Op != "" {
		if r.Op != "hello" || r.Python == "" || r.PID <= 0 {
			return nil, protocolErrorf(nil, "bad %.40q line", r.Op)
		}
		return &r, nil
	}
	if r.ID == nil || r.OK == nil {
		return nil, protocolErrorf(nil, "reply without id or ok")
	}
	if r.Error != nil && r.Error.Type == "" {
		return nil, protocolErrorf(nil, "error without type")
	}
	if !*r.OK && r.Error == nil {
		return nil, protocolErrorf(nil, "ok:false without error")
	}
	for _, d := range r.Display {
		if err := checkDisplay(d); err != nil {
			return nil, err
		}
	}
	if len(r.Result) > 0 {
		dec := json.NewDecoder(bytes.NewReader(r.Result))
		dec.UseNumber()
		if err := dec.Decode(&r.value); err != nil {
			return nil, protocolErrorf(err, "decoding result")
		}
	}
	return &r, nil
}

// checkDisplay rejects items the host could not pass on as MCP content.
func checkDisplay(d Display) error {
	mt := d.MimeType
	slash := strings.IndexByte(mt, '/')
	if len(mt) > maxMimeType || slash <= 0 || slash == len(mt)-1 {
		return protocolErrorf(nil, "bad display mime type %.40q", mt)
	}
	for _, ch := range mt {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || strings.ContainsRune("/.+-", ch)) {
			return protocolErrorf(nil, "bad display mime type %.40q", mt)
		}
	}
	if strings.HasPrefix(mt, "image/") && mt != "image/svg+xml" {
		if _, err := base64.StdEncoding.DecodeString(d.Data); err != nil {
			return protocolErrorf(err, "display %s is not base64", mt)
		}
	}
	return nil
}

// validate checks what an op's successful reply must carry.
func (r *reply) validate(op string) error {
	if op == "ping" && !r.Pong {
		return protocolErrorf(nil, "ping reply without pong")
	}
	return nil
}

func (r *reply) requestError() error {
	return &RequestError{Type: r.Error.Type, Message: r.Error.Message, Traceback: r.Error.Traceback}
}
