// Issue 16 over streamable HTTP: progress and cancellation with the official
// TypeScript SDK client (2025-11-25), and a closed HTTP stream cancelling a
// run with raw 2026-07-28 requests (stateless: no session header, per-request
// _meta). A session survives a cancel with its variables; a stateless
// sandbox is destroyed.
//
// Usage: FORGE_BIN=FORGE_BINARY node --test http-streaming.mjs
// Environment: FORGE_STATE_DIR, passed on to forge. Needs root (it looks for
// the sandbox's processes on the host).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { hostProcess, progressAndCancelTests, within } from "./streaming-shared.mjs";
import { tokenHeaders } from "./serve-http.mjs";

const forge = process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test http-streaming.mjs");

const server = spawn(forge, ["--log-level", "info", "serve", "--http", "127.0.0.1:0"], { env: process.env, stdio: ["ignore", "ignore", "pipe"] });
let log = "";
server.stderr.on("data", (d) => { log += d; process.stderr.write(d); });
await within(15000, () => /url=http:\/\/\S+/.test(log), "forge serve --http's URL");
const url = log.match(/url=(http:\/\/\S+)/)[1];
const auth = tokenHeaders(log); // the local token forge made
test.after(async () => {
  server.kill("SIGTERM");
  await new Promise((r) => server.on("exit", r));
});

const client = new Client({ name: "forge-http-streaming-test", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } }));
test.after(() => client.close());

progressAndCancelTests("HTTP, SDK", client);

// A raw 2026-07-28 tools/call: no initialize, no session header.
const META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
function post(args, signal, progressToken) {
  return fetch(url, {
    method: "POST",
    signal,
    headers: {
      ...auth, "Content-Type": "application/json", Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "execute_python",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call",
      params: { name: "execute_python", arguments: args, _meta: progressToken ? { ...META, progressToken } : META } }),
  });
}
const resultOf = async (resp) => {
  const body = await resp.text();
  const line = body.split("\n").filter((l) => l.startsWith("data: ") || l.startsWith("{")).map((l) => JSON.parse(l.replace(/^data: /, "")))
    .find((m) => m.id === 1);
  assert.ok(line, body);
  return line.result;
};

test("HTTP, 2026-07-28: a closed stream interrupts a session's run; the session survives", async () => {
  const id = `http-closed-${process.pid}`;
  let r = await resultOf(await post({ code: "kept = 5", session_id: id }));
  assert.equal(r.structuredContent.success, true, JSON.stringify(r));
  const ac = new AbortController();
  const resp = await post({ code: "import time\nprint('go', flush=True)\nwhile True: time.sleep(0.01)", session_id: id }, ac.signal, "p");
  const reader = resp.body.getReader();
  await reader.read(); // the first progress: the code runs
  const before = log.length;
  ac.abort();
  const t0 = performance.now();
  // forge logs the cancel once the interrupted code has answered (KeyboardInterrupt).
  const interrupted = await within(2000, () => log.slice(before).includes(`execution cancelled by the client" session=${id}`), "the cancel in forge's log");
  console.log(`# HTTP: stream closed → run interrupted and cancel logged in ${interrupted.toFixed(0)} ms`);
  r = await resultOf(await post({ code: "kept + 1", session_id: id }));
  console.log(`# HTTP: the call after a closed stream answered in ${(performance.now() - t0).toFixed(0)} ms`);
  assert.equal(r.structuredContent.result, 6, JSON.stringify(r));
  await resultOf(await post({ code: "1" })); // the server is fine
  await client.callTool({ name: "destroy_session", arguments: { session_id: id } }).catch(() => {});
});

test("HTTP, 2026-07-28: a closed stream destroys a stateless sandbox", async () => {
  const marker = `sleep 4343.${process.pid}`;
  const ac = new AbortController();
  const resp = await post({ code: `import subprocess\nprint('go', flush=True)\nsubprocess.run(['sh', '-c', '${marker}'])` }, ac.signal, "p");
  await within(15000, () => hostProcess(marker), "the sandbox's sleep on the host");
  ac.abort();
  await resp.body?.cancel().catch(() => {});
  const gone = await within(2000, () => !hostProcess(marker), "the sandbox's processes gone after the stream closed");
  console.log(`# HTTP: stateless sandbox gone ${gone.toFixed(0)} ms after the stream closed`);
});
