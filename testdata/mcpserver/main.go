// Command mcpserver is a small stdio MCP server used by forge's tests as a
// real downstream server of the code-mode bridge (runtime/bridge).
//
// Its tool names can be renamed with -prefix so that two instances offer
// different (or, without it, the same) tools; -hostile adds a tool whose
// name, description and parameter names are crafted to break naive code
// generation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	prefix := flag.String("prefix", "", "prepended to every tool name")
	hostile := flag.Bool("hostile", false, "also offer a tool with a hostile schema")
	crashAfter := flag.Int("crash-after", 0, "exit after this many calls of crash (0: never)")
	flag.Parse()

	s := server.NewMCPServer("forge-test", "1.0.0", server.WithToolCapabilities(false))
	p := *prefix
	s.AddTool(mcp.NewTool(p+"add",
		mcp.WithDescription("Add two integers and return their sum as structured content."),
		mcp.WithInteger("a", mcp.Required(), mcp.Description("first addend")),
		mcp.WithInteger("b", mcp.Required(), mcp.Description("second addend")),
	), add)
	s.AddTool(mcp.NewTool(p+"echo",
		mcp.WithDescription("Echo text back as text content."),
		mcp.WithString("text", mcp.Required(), mcp.Description("what to echo")),
		mcp.WithString("suffix", mcp.Description("appended when given")),
	), echo)
	s.AddTool(mcp.NewTool(p+"json_text",
		mcp.WithDescription("Return a JSON document as text content (no structuredContent)."),
	), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(`{"items": [1, 2, 3], "name": "x"}`), nil
	})
	s.AddTool(mcp.NewTool(p+"fail",
		mcp.WithDescription("Always fails with the given message (isError)."),
		mcp.WithString("message", mcp.Required()),
	), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultError(r.GetString("message", "")), nil
	})
	s.AddTool(mcp.NewTool(p+"slow",
		mcp.WithDescription("Sleep for ms milliseconds, then return them."),
		mcp.WithInteger("ms", mcp.Required()),
	), slow)
	s.AddTool(mcp.NewTool(p+"big",
		mcp.WithDescription("Return a string of the given number of bytes."),
		mcp.WithInteger("bytes", mcp.Required()),
	), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(strings.Repeat("x", r.GetInt("bytes", 0))), nil
	})
	s.AddTool(mcp.NewTool(p+"env_probe",
		mcp.WithDescription("Report whether FORGE_TEST_SECRET is set in this server's environment."),
	), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_, ok := os.LookupEnv("FORGE_TEST_SECRET")
		return mcp.NewToolResultStructured(map[string]any{"set": ok}, fmt.Sprint(ok)), nil
	})
	calls := 0
	s.AddTool(mcp.NewTool(p+"crash",
		mcp.WithDescription("Exit the server process (after -crash-after calls)."),
	), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls++
		if calls >= *crashAfter {
			os.Exit(3)
		}
		return mcp.NewToolResultText("still alive"), nil
	})
	s.AddTool(mcp.NewTool(p+"pid",
		mcp.WithDescription("Return this server's process id."),
	), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultStructured(map[string]any{"pid": os.Getpid()}, fmt.Sprint(os.Getpid())), nil
	})
	if *hostile {
		addHostile(s, p)
	}
	if err := server.ServeStdio(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func add(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	a, err := r.RequireInt("a")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	b, err := r.RequireInt("b")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultStructured(map[string]any{"sum": a + b}, fmt.Sprint(a+b)), nil
}

func echo(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return mcp.NewToolResultText(r.GetString("text", "") + r.GetString("suffix", "")), nil
}

func slow(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ms := r.GetInt("ms", 0)
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
		return mcp.NewToolResultStructured(map[string]any{"slept_ms": ms}, fmt.Sprint(ms)), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// hostileText tries to escape string literals, docstrings and comments of
// generated Python, and to inject code if it were interpolated raw.
const hostileText = "x\"\"\" + __import__('os').system('echo PWNED') + \"\"\"\n''' \\ \\\" \x00 # \r\n" +
	"def evil(): pass\n\u2028 {\"tool\": \"env_probe\"} \U0001F600 \\N{BULLET} {0}"

func addHostile(s *server.MCPServer, p string) {
	s.AddTool(mcp.NewTool(p+"hostile\"; import os #",
		mcp.WithDescription(hostileText),
		mcp.WithString("class", mcp.Required(), mcp.Description(hostileText)),
		mcp.WithString("x-y\"z", mcp.Description("'''"+hostileText)),
		mcp.WithString("_mcp_call", mcp.Description("shadows nothing")),
		mcp.WithString("1st", mcp.Description("starts with a digit")),
		mcp.WithString("x_y_z", mcp.Description("collides with x-y\"z after sanitizing")),
		mcp.WithNumber("__init__", mcp.Description("a dunder")),
	), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultStructured(map[string]any{"arguments": r.GetArguments()}, "ok"), nil
	})
}
