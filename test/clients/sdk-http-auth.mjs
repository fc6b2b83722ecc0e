// The official TypeScript SDK client against `forge serve --http` with
// bearer tokens: refused without a token (and with a wrong one), served with
// one, and each tenant's sessions are its own.
//
// Usage: FORGE_BIN=FORGE_BINARY node --test sdk-http-auth.mjs
// Environment: FORGE_STATE_DIR (a state dir with forge/python:3.11), used
// through a config file that lists the tokens by hash (no tokens.json is
// written into it).
import assert from "node:assert/strict";
import { test } from "node:test";
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const forge = process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test sdk-http-auth.mjs");
const state = process.env.FORGE_STATE_DIR ?? "/var/lib/forge-test";

const tokens = { alice: "forge_ts_" + randomBytes(24).toString("hex"), bob: "forge_ts_" + randomBytes(24).toString("hex") };
const sha = (s) => createHash("sha256").update(s).digest("hex");
const dir = mkdtempSync(join(tmpdir(), "forge-ts-auth-"));
const config = join(dir, "forge.yaml");
writeFileSync(config, `state_dir: ${state}
server:
  auth:
    tokens:
      - {tenant: alice, scopes: [execute, sessions], sha256: ${sha(tokens.alice)}}
      - {tenant: bob, scopes: [execute, sessions], sha256: ${sha(tokens.bob)}}
`);

const server = spawn(forge, ["--log-level", "info", "serve", "--config", config, "--http", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"] });
let log = "";
const url = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("forge serve did not report its URL:\n" + log)), 60000);
  server.stderr.on("data", (b) => {
    log += b;
    const m = log.match(/url=(http:\/\/\S+)/);
    if (m) {
      clearTimeout(timer);
      resolve(m[1]);
    }
  });
  server.on("exit", (code) => reject(new Error(`forge serve exited ${code}:\n${log}`)));
});
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
