// Issue 16 with the official TypeScript SDK client over stdio: progress
// notifications carrying the output of a running call, cancellation (a
// session survives it with its variables, a stateless sandbox is destroyed),
// the compact structured result, and both protocol eras (2026-07-28's
// server/discover with per-request _meta; initialize of 2025-06-18 and
// 2025-11-25).
//
// Usage: FORGE_BIN=FORGE_BINARY node --test sdk-streaming.mjs
// Environment: FORGE_STATE_DIR (a state dir with forge/python:3.11 and
// forge/python-data:3.13 imported), passed on to forge. Needs root (it looks
// for the sandbox's processes on the host).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { progressAndCancelTests, runner, sleep, within } from "./streaming-shared.mjs";

const forge = process.argv[2] ?? process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test sdk-streaming.mjs");
const DATA_IMAGE = process.env.FORGE_DATA_IMAGE ?? "forge/python-data:3.13";

const transport = new StdioClientTransport({ command: forge, args: ["serve"], env: { ...process.env }, stderr: "inherit" });
const client = new Client({ name: "forge-streaming-test", version: "1.0.0" });
await client.connect(transport);
test.after(() => client.close());
const run = runner(client);

progressAndCancelTests("stdio", client);

test("compact result: two plots stay under 8 KB of structuredContent", async () => {
  const code = [
    "import matplotlib.pyplot as plt, pandas as pd",
    "plt.figure(); plt.plot(range(100))",
    "plt.figure(); plt.hist([i % 7 for i in range(1000)])",
    "pd.DataFrame({'a': range(30), 'b': [x * x for x in range(30)]})",
  ].join("\n");
  const res = await run({ code, custom_image: DATA_IMAGE, timeout: 120 });
  assert.notEqual(res.isError, true, JSON.stringify(res.content).slice(0, 2000));
  const sc = JSON.stringify(res.structuredContent);
  console.log(`# structuredContent of two plots and a DataFrame: ${sc.length} bytes`);
  assert.ok(sc.length < 8192, `structuredContent is ${sc.length} bytes`);
  const images = res.content.filter((c) => c.type === "image");
  assert.equal(images.length, 2);
  const refs = res.structuredContent.display.filter((d) => d.mime_type === "image/png");
  assert.equal(refs.length, 2);
  for (const r of refs) {
    assert.equal(r.data, undefined);
    assert.equal(res.content[r.content].type, "image");
    assert.equal(res.content[r.content].data.length, r.bytes);
  }
  const mimes = res.structuredContent.display.map((d) => d.mime_type);
  assert.ok(mimes.includes("text/html") && mimes.includes("text/plain"), `DataFrame as ${mimes}`);
});

test("long output in a session is saved under /workspace and linked", async () => {
  const id = `spill-${process.pid}`;
  const res = await run({ code: "for i in range(5000): print('row', i)", session_id: id });
  const sc = res.structuredContent;
  assert.ok(JSON.stringify(sc).length < 16384);
  assert.equal(sc.files?.length, 1, JSON.stringify(sc.files));
  const link = res.content.find((c) => c.type === "resource_link");
  assert.ok(link, "no resource_link");
  const file = await client.callTool({ name: "read_file", arguments: { session_id: id, path: sc.files[0].path } });
  const text = file.content.filter((c) => c.type === "text").map((c) => c.text).join("");
  assert.match(text, /row 0\n/);
  assert.match(text, /row 4999/);
  // The link itself reads as a resource too.
  const viaLink = await client.readResource({ uri: link.uri });
  assert.equal(viaLink.contents[0].text, text);
  await client.callTool({ name: "destroy_session", arguments: { session_id: id } });
});

// A raw JSON-RPC client over stdio, to speak the eras the SDK does not.
async function raw(lines) {
  const p = spawn(forge, ["serve"], { env: process.env, stdio: ["pipe", "pipe", "inherit"] });
  const rl = createInterface({ input: p.stdout });
  const replies = new Map();
  rl.on("line", (l) => { const m = JSON.parse(l); if (m.id !== undefined) replies.set(m.id, m); });
  try {
    for (const l of lines) {
      p.stdin.write(JSON.stringify(l) + "\n");
      if (l.id !== undefined) await within(30000, () => replies.has(l.id), `reply to ${l.method}`);
    }
    return replies;
  } finally {
    p.stdin.end();
    await new Promise((r) => p.on("exit", r));
  }
}

const META = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "raw-2026", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": {},
};

test("2026-07-28: server/discover with instructions, then a call with per-request _meta", async () => {
  const r = await raw([
    { jsonrpc: "2.0", id: 1, method: "server/discover", params: { _meta: META } },
    { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "execute_python", arguments: { code: "6 * 7" }, _meta: META } },
  ]);
  const d = r.get(1).result;
  assert.ok(d.supportedVersions.includes("2026-07-28") && d.supportedVersions.includes("2025-06-18"), JSON.stringify(d.supportedVersions));
  assert.match(d.instructions, /Stateless/);
  assert.ok(d.capabilities.tools);
  assert.equal(r.get(2).result.structuredContent.result, 42, JSON.stringify(r.get(2)));
});

for (const version of ["2025-06-18", "2025-11-25"]) {
  test(`initialize of ${version}`, async () => {
    const r = await raw([
      { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "raw", version: "1" } } },
      { jsonrpc: "2.0", method: "notifications/initialized" },
      { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "execute_python", arguments: { code: "6 * 7" } } },
    ]);
    assert.equal(r.get(1).result.protocolVersion, version);
    assert.match(r.get(1).result.instructions, /Stateless/);
    assert.equal(r.get(2).result.structuredContent.result, 42);
  });
}

test("no result is sent for a cancelled request (raw stdio)", async () => {
  const p = spawn(forge, ["serve"], { env: process.env, stdio: ["pipe", "pipe", "inherit"] });
  const rl = createInterface({ input: p.stdout });
  const seen = [];
  rl.on("line", (l) => seen.push(JSON.parse(l)));
  const send = (m) => p.stdin.write(JSON.stringify(m) + "\n");
  try {
    send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    send({ jsonrpc: "2.0", method: "notifications/initialized" });
    await within(10000, () => seen.some((m) => m.id === 1), "initialize");
    send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "execute_python", arguments: { code: "import time\nprint('go', flush=True)\ntime.sleep(30)" }, _meta: { progressToken: "t2" } } });
    await within(10000, () => seen.some((m) => m.method === "notifications/progress"), "a first progress");
    send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 2, reason: "stop" } });
    await sleep(500);
    send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "execute_python", arguments: { code: "print('next')" } } });
    await within(10000, () => seen.some((m) => m.id === 3), "the next call");
    assert.equal(seen.find((m) => m.id === 3).result.structuredContent.stdout, "next\n");
    assert.ok(!seen.some((m) => m.id === 2), `a reply to the cancelled request: ${JSON.stringify(seen.find((m) => m.id === 2))}`);
  } finally {
    p.stdin.end();
    await new Promise((r) => p.on("exit", r));
  }
});

test("a call that waits for forge to start hears the image import as progress", async () => {
  // A fresh state dir whose image comes from images.preload: the engine
  // imports it after initialize, and a call meanwhile waits for it. The
  // pool is off, so no sandbox starts.
  const cache = process.env.FORGE_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "forge");
  const layout = join(cache, "images", "forge_python_3.11");
  const dir = mkdtempSync(join(tmpdir(), "forge-preload-"));
  chmodSync(dir, 0o755);
  const env = { ...process.env, FORGE_STATE_DIR: dir, FORGE_IMAGES_PRELOAD: `oci:${layout}`, FORGE_POOL_ENABLED: "false" };
  const c = new Client({ name: "forge-preload-test", version: "1.0.0" });
  try {
    await c.connect(new StdioClientTransport({ command: forge, args: ["serve"], env, stderr: "ignore" }));
    const notes = [];
    const res = await c.callTool({ name: "list_sessions", arguments: {} }, undefined,
      { timeout: 120000, onprogress: (p) => notes.push(p.message ?? "") });
    assert.notEqual(res.isError, true, JSON.stringify(res.content));
    const imports = notes.filter((m) => /^forge is starting: importing oci:.*blob sha256:[0-9a-f]{12}/.test(m));
    assert.ok(imports.length >= 1, `no progress named the import: ${JSON.stringify(notes)}`);
    console.log(`# preload: ${notes.length} progress notifications while the call waited, ${imports.length} naming the import`);
  } finally {
    await c.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
