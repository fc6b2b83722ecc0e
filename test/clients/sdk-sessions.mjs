// Sessions through the official TypeScript SDK over stdio, across a restart
// of forge: x = 41, SIGTERM to `forge serve`, start it again, and x is still
// 41 in the same session while its /workspace files are intact.
//
// Usage: FORGE_BIN=FORGE_BINARY node --test sdk-sessions.mjs
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const forge = process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test sdk-sessions.mjs");

async function connect() {
  const transport = new StdioClientTransport({
    command: forge, args: ["serve"], env: { ...process.env }, stderr: "inherit",
  });
  const client = new Client({ name: "forge-sessions-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

const call = (client, name, args) => client.callTool({ name, arguments: args });
const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

// terminate sends SIGTERM to forge and waits for it to exit (it hibernates
// its sessions first).
async function terminate(transport) {
  const pid = transport.pid;
  assert.ok(pid, "no forge pid");
  const exited = new Promise((resolve) => transport.onclose = resolve);
  process.kill(pid, "SIGTERM");
  await exited;
  for (let i = 0; i < 200; i++) {
    try { process.kill(pid, 0); } catch { return; }
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`forge ${pid} still running 10s after SIGTERM`);
}

test("a session survives SIGTERM and a restart of forge", async () => {
  const id = `sdk-restart-${process.pid}`;
  let { client, transport } = await connect();
  let res = await call(client, "execute_python", { code: "x = 41\nimport math", session_id: id });
  assert.notEqual(res.isError, true, text(res));
  res = await call(client, "write_file", { session_id: id, path: "notes/keep.txt", content: "intact" });
  assert.notEqual(res.isError, true, text(res));
  res = await call(client, "execute_python", { code: "x + 1", session_id: id });
  assert.equal(res.structuredContent.result, 42);

  await terminate(transport);
  ({ client, transport } = await connect());
  try {
    res = await call(client, "list_sessions", {});
    assert.match(text(res), new RegExp(id));
    res = await call(client, "execute_python", { code: "x + 1, math.sqrt(16)", session_id: id });
    assert.notEqual(res.isError, true, text(res));
    assert.match(text(res), /42/);
    res = await call(client, "read_file", { session_id: id, path: "notes/keep.txt" });
    assert.equal(text(res), "intact");
    res = await call(client, "destroy_session", { session_id: id });
    assert.notEqual(res.isError, true, text(res));
  } finally {
    await client.close();
  }
});

test("two sessions are isolated", async () => {
  const { client } = await connect();
  try {
    await call(client, "execute_python", { code: "secret = 1\nopen('/workspace/a', 'w').write('a')", session_id: "iso-a" });
    const res = await call(client, "execute_python", {
      code: "import os\n['secret' in globals(), os.path.exists('/workspace/a')]", session_id: "iso-b",
    });
    assert.deepEqual(res.structuredContent.result, [false, false]);
    await call(client, "destroy_session", { session_id: "iso-a" });
    await call(client, "destroy_session", { session_id: "iso-b" });
  } finally {
    await client.close();
  }
});

test("fork_session copies a session, lists what it could not copy, and the two diverge", async () => {
  const { client } = await connect();
  const src = `sdk-fork-src-${process.pid}`, dst = `sdk-fork-dst-${process.pid}`;
  try {
    let res = await call(client, "execute_python", {
      code: "import threading\nx = 41\nlock = threading.Lock()\nopen('/workspace/f.txt', 'w').write('shared')", session_id: src,
    });
    assert.notEqual(res.isError, true, text(res));
    res = await call(client, "fork_session", { session_id: src, new_session_id: dst });
    assert.notEqual(res.isError, true, text(res));
    assert.equal(res.structuredContent.session_id, dst);
    assert.deepEqual(res.structuredContent.uncopied, ["lock"]);
    assert.match(text(res), /Not copied.*lock/);
    await call(client, "execute_python", { code: "x = 'fork'", session_id: dst });
    res = await call(client, "execute_python", { code: "[x, open('/workspace/f.txt').read(), 'lock' in globals()]", session_id: src });
    assert.deepEqual(res.structuredContent.result, [41, "shared", true]);
    res = await call(client, "execute_python", { code: "[x, open('/workspace/f.txt').read(), 'lock' in globals()]", session_id: dst });
    assert.deepEqual(res.structuredContent.result, ["fork", "shared", false]);
    res = await call(client, "fork_session", { session_id: "never-made", new_session_id: "x" });
    assert.equal(res.isError, true);
    assert.match(text(res), /session not found: never-made/);
  } finally {
    await call(client, "destroy_session", { session_id: src });
    await call(client, "destroy_session", { session_id: dst });
    await client.close();
  }
});
