// Issue 16 with the official TypeScript SDK client over stdio: progress
// notifications carrying the output of a running call, cancellation (a
// session survives it with its variables, a stateless sandbox is destroyed),
// the compact structured result, and both protocol eras (2026-07-28's
// server/discover with per-request _meta; initialize of 2025-06-18 and
// 2025-11-25).
//
// Usage: FORGE_BIN=FORGE_BINARY node --test sdk-streaming.mjs
// Environment: FORGE_STATE_DIR (a state dir with forge/python:3.11 and
// forge/python-data:3.11 imported), passed on to forge. Needs root (it looks
// for the sandbox's processes on the host).
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { readFileSync, existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const forge = process.argv[2] ?? process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test sdk-streaming.mjs");
const DATA_IMAGE = process.env.FORGE_DATA_IMAGE ?? "forge/python-data:3.11";
const stateDir = process.env.FORGE_STATE_DIR ?? "/var/lib/forge-test";

const transport = new StdioClientTransport({ command: forge, args: ["serve"], env: { ...process.env }, stderr: "inherit" });
const client = new Client({ name: "forge-streaming-test", version: "1.0.0" });
await client.connect(transport);
test.after(() => client.close());

const run = (args, opts = {}) => client.callTool({ name: "execute_python", arguments: args }, undefined, { timeout: 60000, ...opts });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls cond every 20 ms until it holds or ms pass; returns how long it took.
async function within(ms, cond, what) {
  const t0 = performance.now();
  while (!(await cond())) {
    if (performance.now() - t0 > ms) assert.fail(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
  return performance.now() - t0;
}

const hostProcess = (marker) => {
  try {
    execFileSync("pgrep", ["-f", marker], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
};

const auditHas = (event, pred) => {
  const path = join(stateDir, "audit.log");
  if (!existsSync(path)) return false;
  return readFileSync(path, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
    .some((e) => e.event === event && pred(e));
};

test("progress: a run printing every 0.3 s for 3 s streams its output in order", async () => {
  const notes = [];
  const code = "import time\nfor i in range(10):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.3)";
  const res = await run({ code }, { onprogress: (p) => notes.push({ ...p, at: performance.now() }) });
  assert.notEqual(res.isError, true, JSON.stringify(res.content));
  assert.ok(notes.length >= 5, `got ${notes.length} progress notifications, want at least 5`);
  for (let i = 1; i < notes.length; i++) {
    assert.ok(notes[i].progress > notes[i - 1].progress, `progress not increasing: ${notes[i - 1].progress} then ${notes[i].progress}`);
    // At most every 250 ms, by the server's clock (progress is the elapsed time in seconds).
    assert.ok(notes[i].progress - notes[i - 1].progress >= 0.25, `notifications ${i - 1} and ${i} sent ${notes[i].progress - notes[i - 1].progress} s apart`);
  }
  const streamed = notes.map((n) => n.message).join("");
  const ticks = [...streamed.matchAll(/tick (\d)/g)].map((m) => Number(m[1]));
  assert.ok(ticks.length >= 5, `streamed output ${JSON.stringify(streamed)} has fewer than 5 ticks`);
  assert.deepEqual(ticks, [...ticks].sort((a, b) => a - b), "ticks out of order");
  assert.ok(notes.at(-1).progress >= 1.5, `last progress ${notes.at(-1).progress} s, want the elapsed time`);
  assert.match(res.structuredContent.stdout, /tick 9/);
});

test("cancel mid-run: the session survives with its variables", async () => {
  const id = `cancel-${process.pid}`;
  let res = await run({ code: "kept = 42", session_id: id });
  assert.notEqual(res.isError, true, JSON.stringify(res.content));
  const ac = new AbortController();
  let started = false;
  const pending = run({ code: "import time\nprint('started', flush=True)\nwhile True: time.sleep(0.01)", session_id: id },
    { signal: ac.signal, onprogress: () => { started = true; } });
  await within(10000, () => started, "the run's first progress");
  ac.abort("the person pressed stop");
  await assert.rejects(pending, (err) => /abort|cancel|stop/i.test(String(err)));
  const t0 = performance.now();
  res = await run({ code: "kept + 1", session_id: id });
  const next = performance.now() - t0;
  assert.notEqual(res.isError, true, JSON.stringify(res.content));
  assert.equal(res.structuredContent.result, 43, JSON.stringify(res.structuredContent));
  console.log(`# session: the call after a cancel answered in ${next.toFixed(0)} ms`);
  assert.ok(next < 1500, `the next call took ${next} ms: the cancelled run was not interrupted promptly`);
  await within(2000, () => auditHas("execution.cancel", (e) => e.session_id === id), "the audit log's execution.cancel");
  await client.callTool({ name: "destroy_session", arguments: { session_id: id } });
});

test("cancel a stateless run: its sandbox is destroyed", async () => {
  const marker = `sleep 4242.${process.pid}`;
  const ac = new AbortController();
  const pending = run({ code: `import subprocess\nsubprocess.run(['sh', '-c', '${marker}'])` }, { signal: ac.signal });
  await within(15000, () => hostProcess(marker), "the sandbox's sleep on the host");
  const t0 = performance.now();
  ac.abort("stop");
  await assert.rejects(pending);
  const gone = await within(2000, () => !hostProcess(marker), "the sandbox's processes gone after cancel");
  console.log(`# stateless: sandbox processes gone ${(performance.now() - t0).toFixed(0)} ms after the cancel (polled: ${gone.toFixed(0)} ms)`);
  // The server is fine and answers the next call.
  const res = await run({ code: "print('after')" });
  assert.equal(res.structuredContent.stdout, "after\n");
});

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
