"""`python -m forge_tools serve`: the JSON-RPC and MCP behaviour of the stdio server, as a real subprocess."""

import json
import os
import queue
import subprocess
import sys
import threading

import pytest

from conftest import ROOT

DEMO = os.path.join(ROOT, "examples", "demo.py")


class Proc:
    """A server subprocess with line-level access and read deadlines."""

    def __init__(self, path=DEMO):
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.p = subprocess.Popen(
            [sys.executable, "-m", "forge_tools", "serve", path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        self.lines: "queue.Queue[bytes]" = queue.Queue()
        self.stderr = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, obj):
        raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.p.stdin.write(raw + b"\n")
        self.p.stdin.flush()

    def recv(self, timeout=10):
        line = self.lines.get(timeout=timeout)
        assert line, "the server closed stdout"
        return json.loads(line)

    def request(self, id_, method, params=None):
        msg = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.recv()

    def initialize(self, version="2025-06-18"):
        res = self.request(0, "initialize", {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return res

    def close(self):
        self.p.stdin.close()
        rc = self.p.wait(10)
        self.stderr = self.p.stderr.read()
        self.reader.join(10)
        self.p.stdout.close()
        self.p.stderr.close()
        return rc


@pytest.fixture(scope="module")
def server():
    """One server for the tests that leave it running (a spawn costs about half a second here)."""
    s = Proc()
    yield s
    if s.p.poll() is None:
        s.close()


@pytest.fixture
def fresh():
    """A server of its own, for a test that closes it."""
    s = Proc()
    yield s
    if s.p.poll() is None:
        s.close()


@pytest.mark.parametrize("asked,got", [
    ("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"), ("2024-11-05", "2025-11-25"), ("1999-01-01", "2025-11-25"),
])
def test_initialize_negotiates_the_version(server, asked, got):
    res = server.initialize(asked)
    assert res["id"] == 0
    assert res["result"]["protocolVersion"] == got
    assert res["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert res["result"]["serverInfo"]["name"] == "forge_tools"


def test_tools_list_and_call(server):
    server.initialize()
    tools = server.request(1, "tools/list")["result"]["tools"]
    by_name = {t["name"]: t for t in tools}
    assert list(by_name) == ["add", "greet", "summarize", "move", "mix", "divide", "wait", "chatty"]
    assert by_name["add"]["inputSchema"]["required"] == ["a"]
    assert by_name["add"]["outputSchema"]["properties"]["result"]["type"] == "integer"
    res = server.request(2, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    assert res == {"jsonrpc": "2.0", "id": 2, "result": {
        "content": [{"type": "text", "text": "5"}], "structuredContent": {"result": 5}, "isError": False,
    }}
    res = server.request(3, "tools/call", {"name": "move", "arguments": {"p": {"x": 1}}})
    assert res["result"]["structuredContent"] == {"x": 2.0, "y": 1.0}


def test_exceptions_and_timeouts_are_tool_errors(server):
    server.initialize()
    res = server.request(1, "tools/call", {"name": "divide", "arguments": {"a": 1, "b": 0}})["result"]
    assert res["isError"] is True
    assert res["content"][0]["text"] == "ZeroDivisionError: float division by zero"
    res = server.request(2, "tools/call", {"name": "wait", "arguments": {"seconds": 5}})["result"]
    assert res["isError"] is True and res["_meta"]["forge/error"]["type"] == "TimeoutError"


def test_print_does_not_corrupt_the_stream(fresh):
    server = fresh
    server.initialize()
    res = server.request(1, "tools/call", {"name": "chatty"})
    assert res["result"]["structuredContent"] == {"result": "ok"}
    assert server.request(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
    server.close()
    assert b"this line goes to stderr" in server.stderr


@pytest.mark.parametrize("line,code,id_", [
    (b"not json", -32700, None),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"", -32700, None),
    (b"\xff\xfe", -32700, None),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": \"divide\", \"arguments\": {\"a\": NaN, \"b\": 1}}}", -32700, None),
    (b"[" * 100000 + b"]" * 100000, -32700, None),
    (b"[]", -32600, None),
    (b"[{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}]", -32600, None),
    (b"42", -32600, None),
    (b"{\"id\": 5, \"method\": \"ping\"}", -32600, 5),
    (b"{\"jsonrpc\": \"1.0\", \"id\": \"s\", \"method\": \"ping\"}", -32600, "s"),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 6, \"method\": 7}", -32600, 6),
    (b"{\"jsonrpc\": \"2.0\", \"id\": {\"a\": 1}, \"method\": \"ping\"}", -32600, None),
    (b"{\"jsonrpc\": \"2.0\", \"id\": true, \"method\": \"ping\"}", -32600, None),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"resources/list\"}", -32601, 7),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 8, \"method\": \"ping\", \"params\": [1]}", -32602, 8),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"tools/call\", \"params\": {\"name\": \"nope\"}}", -32602, 9),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 10, \"method\": \"tools/call\", \"params\": {\"name\": \"add\", \"arguments\": 3}}", -32602, 10),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 11, \"method\": \"tools/call\", \"params\": {}}", -32602, 11),
    (b"{\"jsonrpc\": \"2.0\", \"id\": 12, \"method\": \"initialize\", \"params\": {}}", -32602, 12),
], ids=[
    "not JSON", "truncated", "not UTF-8", "NaN is not JSON", "nested too deep", "empty batch", "batch", "not an object", "no jsonrpc",
    "jsonrpc 1.0", "method not a string", "id an object", "id a boolean", "unknown method", "params an array",
    "unknown tool", "arguments not an object", "no tool name", "initialize without a version",
])
def test_protocol_errors(server, line, code, id_):
    server.send(line)
    res = server.recv()
    assert res["jsonrpc"] == "2.0" and res["id"] == id_ and res["error"]["code"] == code, res
    assert server.request(99, "ping")["result"] == {}  # the server goes on


def test_invalid_arguments_name_the_field(server):
    server.initialize()
    res = server.request(1, "tools/call", {"name": "move", "arguments": {"p": {"x": "far"}, "by": [1]}})
    err = res["error"]
    assert err["code"] == -32602
    assert "arguments.p.x: expected number, got string" in err["message"]
    assert err["data"] == {"tool": "move", "field": "arguments.p.x", "path": ["p", "x"]}
    res = server.request(2, "tools/call", {"name": "summarize", "arguments": {"values": [1, "2"]}})
    assert "arguments.values[1]" in res["error"]["message"]


def test_notifications_get_no_reply(server):
    server.initialize()
    for method in ("notifications/initialized", "notifications/unknown", "tools/list", "nope"):
        server.send({"jsonrpc": "2.0", "method": method})  # no id: a notification, even for a request method
    server.send({"jsonrpc": "2.0", "id": 4, "result": {}})  # a response to nothing: ignored
    assert server.request(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
    with pytest.raises(queue.Empty):
        server.lines.get(timeout=0.3)


def test_calls_run_concurrently_and_can_be_cancelled(server):
    server.initialize()
    server.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call", "params": {"name": "wait", "arguments": {"seconds": 0.4}}})
    assert server.request("p", "ping")["id"] == "p"  # answered first: ping was not held up by the call
    assert server.recv()["id"] == "slow"
    server.send({"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": {"name": "wait", "arguments": {"seconds": 0.4}}})
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c"}})
    assert server.request("after", "ping")["id"] == "after"
    with pytest.raises(queue.Empty):  # no response for the cancelled request
        server.lines.get(timeout=0.7)


def test_stderr_says_unsandboxed(fresh):
    server = fresh
    server.initialize()
    assert server.close() == 0
    assert b"UNSANDBOXED" in server.stderr
    assert b"serving 8 tools" in server.stderr


def test_a_bad_tools_file_fails_at_start(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from forge_tools import tool\n@tool\ndef f(x: bytes) -> None: ...\n")
    s = Proc(str(bad))
    assert s.close() == 1
    assert b"parameter 'x' has an unsupported type hint bytes" in s.stderr
    assert b"bad.f" in s.stderr


def test_a_lone_surrogate_in_a_result_is_escaped(tmp_path):
    path = tmp_path / "odd.py"
    path.write_text("from forge_tools import tool\n@tool\ndef odd() -> str:\n    return '\\ud800'\n")
    s = Proc(str(path))
    try:
        res = s.request(1, "tools/call", {"name": "odd"})
        assert res["result"]["structuredContent"] == {"result": "\ud800"}
    finally:
        s.close()
