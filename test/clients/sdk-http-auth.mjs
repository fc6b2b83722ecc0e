// The official TypeScript SDK client against `forge serve --http` with
// bearer tokens: refused without a token (and with a wrong one), served with
// one, each tenant's sessions and saved tools are its own, and tools/list
// shows a token only the tools its scopes allow.
//
// Usage: FORGE_BIN=FORGE_BINARY node --test sdk-http-auth.mjs
// Environment: FORGE_STATE_DIR (a state dir with forge/python:3.11), used
// through a config file that lists the tokens by hash (no tokens.json is
// written into it).
import assert from "node:assert/strict";
import { test } from "node:test";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { serveHTTP } from "./serve-http.mjs";

const forge = process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test sdk-http-auth.mjs");
const state = process.env.FORGE_STATE_DIR ?? "/var/lib/forge-test";

const newToken = () => "forge_ts_" + randomBytes(24).toString("hex");
const tokens = { alice: newToken(), bob: newToken(), reader: newToken(), carol: newToken(), dave: newToken() };
const sha = (s) => createHash("sha256").update(s).digest("hex");
const dir = mkdtempSync(join(tmpdir(), "forge-ts-auth-"));
const config = join(dir, "forge.yaml");
writeFileSync(config, `state_dir: ${state}
server:
  auth:
    tokens:
      - {tenant: alice, scopes: [execute, sessions], sha256: ${sha(tokens.alice)}}
      - {tenant: bob, scopes: [execute, sessions], sha256: ${sha(tokens.bob)}}
      - {tenant: reader, scopes: [tools], sha256: ${sha(tokens.reader)}}
      - {tenant: carol, scopes: [execute, sessions, tools], sha256: ${sha(tokens.carol)}}
      - {tenant: dave, scopes: [execute, sessions, tools], sha256: ${sha(tokens.dave)}}
hosted_tools:
  save_tool: allow
  pool_size: 0
`);

const { server, url } = await serveHTTP(forge, ["--config", config]);
test.after(() => {
  server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

async function connect(token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const client = new Client({ name: "forge-sdk-http-auth", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

test("no token: refused with 401", async () => {
  await assert.rejects(connect(null), /401|Unauthorized|invalid|token/i);
});

test("a wrong token: refused", async () => {
  await assert.rejects(connect("forge_ts_wrong"), /401|Unauthorized|invalid|token/i);
});

test("with a token: execute_python runs; sessions are the tenant's own", async () => {
  const alice = await connect(tokens.alice);
  const bob = await connect(tokens.bob);
  try {
    const res = await alice.callTool({ name: "execute_python", arguments: { code: "secret = 41\nsecret + 1", backend: "jupyter" } });
    assert.notEqual(res.isError, true, text(res));
    assert.equal(res.structuredContent.result, 42);
    const sid = res.structuredContent.session_id;
    assert.ok(sid);
    const listed = await bob.callTool({ name: "list_sessions", arguments: {} });
    assert.ok(!JSON.stringify(listed).includes(sid), "bob lists alice's session");
    const peek = await bob.callTool({ name: "execute_python", arguments: { code: "secret", session_id: sid } });
    assert.equal(peek.isError, true, "bob read alice's variable: " + text(peek));
    assert.match(text(peek), /NameError/);
    await alice.callTool({ name: "destroy_session", arguments: { session_id: sid } });
    await bob.callTool({ name: "destroy_session", arguments: { session_id: sid } });
  } finally {
    await alice.close();
    await bob.close();
  }
});

const names = async (client) => (await client.listTools()).tools.map((t) => t.name);

test("tools/list shows a token the tools of its scopes; a hidden tool's call names the scope", async () => {
  const alice = await connect(tokens.alice);
  const reader = await connect(tokens.reader);
  try {
    const a = await names(alice);
    for (const n of ["execute_python", "list_sessions", "fork_session"]) assert.ok(a.includes(n), `alice lists no ${n}: ${a}`);
    for (const n of ["save_tool", "remove_tool"]) assert.ok(!a.includes(n), `alice (no scope tools) lists ${n}: ${a}`);
    const r = await names(reader);
    for (const n of ["execute_python", "list_sessions", "destroy_session"]) assert.ok(!r.includes(n), `reader (scope tools only) lists ${n}: ${r}`);
    assert.ok(r.includes("save_tool"), `reader lists no save_tool: ${r}`);
    const res = await reader.callTool({ name: "execute_python", arguments: { code: "1" } });
    assert.equal(res.isError, true);
    assert.match(text(res), /lacks scope "execute"/);
  } finally {
    await alice.close();
    await reader.close();
  }
});

test("a saved tool is its tenant's: another tenant cannot list, call or remove it", async () => {
  const carol = await connect(tokens.carol);
  const dave = await connect(tokens.dave);
  const tool = "quad_" + randomBytes(4).toString("hex");
  try {
    const def = await carol.callTool({ name: "execute_python", arguments: { backend: "jupyter", code: `def ${tool}(x: int) -> int:\n    return 4 * x\n` } });
    assert.notEqual(def.isError, true, text(def));
    const sid = def.structuredContent.session_id;
    const saved = await carol.callTool({ name: "save_tool", arguments: { session_id: sid, function: tool } });
    assert.notEqual(saved.isError, true, text(saved));
    await carol.callTool({ name: "destroy_session", arguments: { session_id: sid } });
    assert.ok((await names(carol)).includes(tool), "carol does not list her saved tool");
    assert.equal((await carol.callTool({ name: tool, arguments: { x: 10 } })).structuredContent.result, 40);

    assert.ok(!(await names(dave)).includes(tool), "dave lists carol's saved tool");
    const unknown = await dave.callTool({ name: "no_such_" + tool, arguments: { x: 10 } }).then((r) => "result " + text(r), (e) => e.message.replaceAll("no_such_" + tool, "NAME"));
    const theirs = await dave.callTool({ name: tool, arguments: { x: 10 } }).then((r) => "result " + text(r), (e) => e.message.replaceAll(tool, "NAME"));
    assert.equal(theirs, unknown, "dave calling carol's tool is answered unlike an unknown tool");
    const hosted = await dave.readResource({ uri: "forge://tools/hosted" });
    assert.ok(!JSON.stringify(hosted).includes(tool), "dave's forge://tools/hosted shows carol's tool");
    const rm = await dave.callTool({ name: "remove_tool", arguments: { name: tool } });
    assert.equal(rm.isError, true, "dave removed carol's tool: " + text(rm));
    assert.ok((await names(carol)).includes(tool), "carol's tool is gone after dave's remove_tool");
  } finally {
    await carol.callTool({ name: "remove_tool", arguments: { name: tool } }).catch(() => {});
    await carol.close();
    await dave.close();
  }
});
