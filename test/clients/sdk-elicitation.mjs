// Approval through MCP elicitation with the official TypeScript SDK client
// over stdio (issues 12 and 13): environment_builder.approval: elicit for a
// package of approval_packages (six, from the real index), and
// hosted_tools.save_tool: approve. A client that declares elicitation and
// accepts gets the build and the saved tool, one that declines gets a
// refusal and nothing is made, one without the capability gets the refusal
// that names the setting. The audit log says who approved what. Each case
// runs over stdio (forge's own loop) and over streamable HTTP (mcp-go's).
//
// Usage: FORGE_BIN=FORGE_BINARY node --test sdk-elicitation.mjs
// Environment: FORGE_STATE_DIR (a state dir with forge/python:3.11).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { serveHTTP } from "./serve-http.mjs";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const forge = process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test sdk-elicitation.mjs");
const state = process.env.FORGE_STATE_DIR ?? "/var/lib/forge-test";
const dir = mkdtempSync(join(tmpdir(), "forge-elicit-"));
const auditLog = join(dir, "audit.log");
const config = join(dir, "forge.yaml");
// This machine reaches PyPI through a TLS-inspecting proxy whose CA only
// the host's bundle holds (as in runtime/build's TestBuildFromPyPI).
const ca = "/etc/ssl/certs/ca-certificates.crt";
// The stdio servers and the HTTP server write audit logs of their own.
const configOf = (log) => `state_dir: ${state}
security:
  audit_log: ${log}
environment_builder:
  enabled: true
  allowed_packages: ["*"]
  approval_packages: ["six"]
  approval: elicit
  ca_bundle: "${existsSync(ca) ? ca : ""}"
hosted_tools:
  save_tool: approve
  pool_size: 0
`;
writeFileSync(config, configOf(auditLog));
const configHTTP = join(dir, "forge-http.yaml");
writeFileSync(configHTTP, configOf(join(dir, "audit-http.log")));
const runBase = randomBytes(4).toString("hex");
const made = []; // environments to remove at the end

// One forge serve --http for the HTTP cases, on a port the kernel picks.
const { server, url, headers } = await serveHTTP(forge, ["--config", configHTTP]);
test.after(async () => {
  const exited = new Promise((resolve) => server.on("exit", resolve));
  server.kill("SIGTERM");
  await exited;
  for (const name of made) {
    try { execFileSync(forge, ["--config", config, "env", "rm", name], { stdio: "ignore" }); } catch { /* not built */ }
  }
  rmSync(dir, { recursive: true, force: true });
});

// connect starts a client that answers every elicitation with answer
// (accept, decline, cancel), or that does not declare the capability at
// all (answer null): over stdio a forge serve of its own, over http the
// shared one.
async function connect(mode, answer) {
  const transport = mode === "stdio"
    ? new StdioClientTransport({ command: forge, args: ["serve", "--config", config], env: { ...process.env }, stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: `elicit-${answer ?? "none"}`, version: "1.0.0" },
    { capabilities: answer ? { elicitation: {} } : {} });
  const asked = [];
  if (answer) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params.message);
      return answer === "accept" ? { action: "accept", content: {} } : { action: answer };
    });
  }
  await client.connect(transport);
  return { client, asked };
}

const call = (client, name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 600_000 });
const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
const events = (mode) => readFileSync(join(dir, mode === "stdio" ? "audit.log" : "audit-http.log"), "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
const envNames = async (client) => {
  const r = await client.readResource({ uri: "forge://environments/list" });
  return JSON.parse(r.contents[0].text).environments.map((e) => e.name);
};

for (const mode of ["stdio", "http"]) {
  const run = runBase + (mode === "stdio" ? "0" : "1");

  // Over HTTP the principal is the listener's, new in every run, whose
  // environments forge env rm cannot remove: the accepted build runs over
  // stdio only (the accepted save_tool covers HTTP's answer).
  if (mode === "stdio") test(`${mode} build: a client that accepts gets the environment, audited as build.approved`, async () => {
    const name = `el-acc-${run}`;
    made.push(name);
    const { client, asked } = await connect(mode, "accept");
    try {
      // A spec of this run only, so that this is a build (the shared state
      // dir may hold an approved six==1.16.0 of an earlier run).
      const res = await call(client, "build_custom_environment", { name, packages: [`six==1.16.0,!=0.0.${parseInt(run, 16)}`] });
      assert.notEqual(res.isError, true, text(res));
      assert.equal(res.structuredContent.cached, false);
      assert.equal(asked.length, 1);
      assert.match(asked[0], /six/);
      assert.match(asked[0], new RegExp(name));
      assert.ok((await envNames(client)).includes(name));
      const run1 = await call(client, "execute_python", { code: "import six; six.__version__", custom_image: name });
      assert.equal(run1.structuredContent.result, "1.16.0", text(run1));
      const ev = events(mode).find((e) => e.event === "build.approved" && e.fields?.name === name);
      assert.ok(ev, "no build.approved event");
      assert.equal(ev.fields.by, "elicit-accept/1.0.0");
      assert.equal(ev.fields.packages, "six");
      if (mode === "stdio") assert.equal(ev.principal, "local");
      assert.ok(events(mode).some((e) => e.event === "build.complete" && e.image?.endsWith(`:${name}`)));
    } finally {
      await client.close();
    }
  });

  for (const answer of ["decline", "cancel"]) {
    test(`${mode} build: a client that answers ${answer} gets a refusal and nothing is built`, async () => {
      const name = `el-${answer}-${run}`;
      made.push(name);
      const { client, asked } = await connect(mode, answer);
      try {
        // Another spec than the accepted build's: an environment of that
        // hash was approved, and a cache hit of it is not asked about again.
        const res = await call(client, "build_custom_environment", { name, packages: ["six>=1.0"] });
        assert.equal(res.isError, true, text(res));
        assert.match(text(res), /six/);
        assert.match(text(res), new RegExp(`did not approve.*${answer}`));
        assert.equal(asked.length, 1);
        assert.ok(!(await envNames(client)).includes(name), `${name} was built`);
        const evs = events(mode);
        assert.ok(evs.some((e) => e.event === "build.declined" && e.fields?.name === name && e.fields.action === answer));
        assert.ok(!evs.some((e) => e.event === "build.complete" && e.image?.endsWith(`:${name}`)));
      } finally {
        await client.close();
      }
      const ls = execFileSync(forge, ["--config", config, "env", "ls", "--json"], { encoding: "utf8" });
      assert.ok(!ls.includes(name), `forge env ls lists ${name}`);
    });
  }

  test(`${mode} build: a client without elicitation gets the refusal naming the settings`, async () => {
    const name = `el-none-${run}`;
    made.push(name);
    const { client } = await connect(mode, null);
    try {
      const res = await call(client, "build_custom_environment", { name, packages: ["six>=1.0"] });
      assert.equal(res.isError, true, text(res));
      for (const w of ["six", "elicitation", "environment_builder.approved_packages", "environment_builder.approval"]) {
        assert.ok(text(res).includes(w), `${JSON.stringify(text(res))} does not name ${w}`);
      }
      assert.ok(!(await envNames(client)).includes(name));
      assert.ok(!events(mode).some((e) => (e.event === "build.approved" || e.event === "build.declined") && e.fields?.name === name));
    } finally {
      await client.close();
    }
  });

  // defineIn defines fn in a new session.
  async function defineIn(client, session, fn) {
    const res = await call(client, "execute_python", { session_id: session,
      code: `def ${fn}(x: int) -> int:\n    """Triples x."""\n    return 3 * x\n` });
    assert.notEqual(res.isError, true, text(res));
  }

  test(`${mode} save_tool: a client that accepts saves the tool, audited as tool.approved`, async () => {
    const fn = `triple_${run}`;
    const { client, asked } = await connect(mode, "accept");
    try {
      await defineIn(client, `el-save-${run}`, fn);
      const res = await call(client, "save_tool", { session_id: `el-save-${run}`, function: fn });
      assert.notEqual(res.isError, true, text(res));
      assert.equal(asked.length, 1);
      assert.match(asked[0], new RegExp(fn));
      const tools = (await client.listTools()).tools.map((t) => t.name);
      assert.ok(tools.includes(fn), `${fn} not in ${tools}`);
      const r = await call(client, fn, { x: 14 });
      assert.equal(r.structuredContent.result, 42, text(r));
      const ev = events(mode).find((e) => e.event === "tool.approved" && e.fields?.function === fn);
      assert.ok(ev, "no tool.approved event");
      assert.equal(ev.client, "elicit-accept/1.0.0");
      assert.equal(ev.session_id, `el-save-${run}`);
      const rm = await call(client, "remove_tool", { name: fn });
      assert.notEqual(rm.isError, true, text(rm));
    } finally {
      await call(client, "destroy_session", { session_id: `el-save-${run}` }).catch(() => {});
      await client.close();
    }
  });

  test(`${mode} save_tool: a client that declines saves nothing, audited as tool.declined`, async () => {
    const fn = `triple_no_${run}`;
    const { client, asked } = await connect(mode, "decline");
    try {
      await defineIn(client, `el-nosave-${run}`, fn);
      const res = await call(client, "save_tool", { session_id: `el-nosave-${run}`, function: fn });
      assert.equal(res.isError, true, text(res));
      assert.match(text(res), /did not approve/);
      assert.equal(asked.length, 1);
      assert.ok(!(await client.listTools()).tools.some((t) => t.name === fn));
      const hosted = await client.readResource({ uri: "forge://tools/hosted" });
      assert.ok(!hosted.contents[0].text.includes(fn), "the declined tool is listed in forge://tools/hosted");
      assert.ok(events(mode).some((e) => e.event === "tool.declined" && e.fields?.function === fn && e.fields.action === "decline"));
    } finally {
      await call(client, "destroy_session", { session_id: `el-nosave-${run}` }).catch(() => {});
      await client.close();
    }
  });

  test(`${mode} save_tool: a client without elicitation is refused, naming the setting`, async () => {
    const { client } = await connect(mode, null);
    try {
      const res = await call(client, "save_tool", { session_id: `el-nothing-${run}`, function: "f" });
      assert.equal(res.isError, true, text(res));
      assert.match(text(res), /hosted_tools\.save_tool/);
      assert.match(text(res), /elicitation/);
    } finally {
      await client.close();
    }
  });
}
