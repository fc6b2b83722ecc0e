// The official TypeScript SDK client against `python3 -m forge_tools serve`
// (sdk/python, the standalone MCP stdio server) serving sdk/python/examples/demo.py.
// Every schema is also compiled by Ajv's JSON Schema 2020-12 validator in
// strict mode, and every structuredContent is checked against its outputSchema
// with it (the SDK itself validates with a draft-07 Ajv, which skips prefixItems).
//
// Usage: node --test forge-tools-sdk.mjs
// Environment: PYTHON (default python3).
import assert from "node:assert/strict";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ErrorCode, LATEST_PROTOCOL_VERSION, McpError } from "@modelcontextprotocol/sdk/types.js";
import Ajv2020 from "ajv/dist/2020.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const sdk = join(root, "sdk/python");
const demo = join(sdk, "examples/demo.py");
const python = process.env.PYTHON ?? "python3";

const stderr = [];
const transport = new StdioClientTransport({
  command: python,
  args: ["-m", "forge_tools", "serve", demo],
  env: { ...process.env, PYTHONPATH: sdk },
  stderr: "pipe",
});
transport.stderr.on("data", (chunk) => stderr.push(chunk));
let negotiated;
transport.setProtocolVersion = (v) => (negotiated = v); // the client reports the version it agreed on here
const client = new Client({ name: "forge-tools-sdk-test", version: "1.0.0" });
await client.connect(transport);
test.after(() => client.close());

const ajv = new Ajv2020({ strict: true, allErrors: true });
const { tools } = await client.listTools();
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
const outputValidators = {};

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

async function call(name, args) {
  const res = await client.callTool({ name, arguments: args });
  if (!res.isError && byName[name].outputSchema) {
    const ok = outputValidators[name](res.structuredContent);
    assert.ok(ok, `${name}: ${ajv.errorsText(outputValidators[name].errors)}`);
  }
  return res;
}

test("initialize: the latest protocol version, the tools capability, unsandboxed on stderr", () => {
  assert.equal(negotiated, LATEST_PROTOCOL_VERSION);
  assert.deepEqual(client.getServerCapabilities(), { tools: { listChanged: false } });
  assert.equal(client.getServerVersion().name, "forge_tools");
  assert.equal(LATEST_PROTOCOL_VERSION, "2025-11-25");
  assert.match(client.getInstructions(), /unsandboxed/);
  assert.match(Buffer.concat(stderr).toString(), /UNSANDBOXED/);
});

test("tools/list: every tool, with schemas valid as JSON Schema 2020-12", () => {
  assert.deepEqual(tools.map((t) => t.name), ["add", "greet", "summarize", "move", "mix", "divide", "wait", "chatty"]);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object", t.name);
    ajv.compile(t.inputSchema); // throws on a schema that is not valid 2020-12 (strict: no unknown keywords)
    assert.equal(t.outputSchema.type, "object", t.name);
    outputValidators[t.name] = ajv.compile(t.outputSchema);
  }
});

test("schemas come from the hints and the docstrings", () => {
  const add = byName.add;
  assert.equal(add.description, "Adds two integers.");
  assert.deepEqual(add.inputSchema.required, ["a"]);
  assert.deepEqual(add.inputSchema.properties.b, { type: "integer", description: "The second addend.", default: 1 });
  assert.deepEqual(add.outputSchema.properties.result, { type: "integer", description: "The sum." });
  assert.deepEqual(byName.greet.inputSchema.properties, {
    name: { type: "string", description: "Who to greet." },
    style: { type: "string", enum: ["plain", "shout"], default: "plain" },
  });
  const move = byName.move.inputSchema.properties;
  assert.deepEqual(move.p.required, ["x"]);
  assert.equal(move.p.properties.x.description, "Distance from the y axis.");
  assert.deepEqual(move.by.prefixItems, [{ type: "number" }, { type: "number" }]);
  assert.equal(move.by.description, "The offset, as (dx, dy).");
  assert.equal(byName.summarize.inputSchema.properties.values.description, "The numbers to summarize.");
  assert.equal(byName.summarize.outputSchema.required, undefined); // TypedDict, total=False
  assert.deepEqual(byName.mix.inputSchema.properties.colors.items.enum, ["red", "green", "blue"]);
});

test("tools/call: structuredContent and text", async () => {
  let res = await call("add", { a: 2, b: 3 });
  assert.notEqual(res.isError, true, text(res));
  assert.deepEqual(res.structuredContent, { result: 5 });
  assert.equal(text(res), "5");
  res = await call("greet", { name: "Ada", style: "shout" });
  assert.deepEqual(res.structuredContent, { result: "HELLO, ADA!" });
  res = await call("move", { p: { x: 1, y: 2 }, by: [0.5, -1] });
  assert.deepEqual(res.structuredContent, { x: 1.5, y: 1 });
  res = await call("summarize", { values: [1, 2, 6] });
  assert.deepEqual(res.structuredContent, { count: 3, mean: 3, maximum: 6 });
  res = await call("mix", { colors: ["blue", "red"] });
  assert.deepEqual(res.structuredContent, { result: "blue" });
  res = await call("wait", { seconds: 0.01 });
  assert.deepEqual(res.structuredContent, { result: "waited 0.01 s" });
  res = await call("chatty", {});
  assert.deepEqual(res.structuredContent, { result: "ok" }); // its print() did not corrupt the stream
});

test("an exception is an isError result with its type and message", async () => {
  const res = await call("divide", { a: 1, b: 0 });
  assert.equal(res.isError, true);
  assert.equal(text(res), "ZeroDivisionError: float division by zero");
  assert.deepEqual(res._meta["forge/error"], { type: "ZeroDivisionError", message: "float division by zero" });
});

test("a call past its timeout is an isError result", async () => {
  const res = await call("wait", { seconds: 5 });
  assert.equal(res.isError, true);
  assert.match(text(res), /^TimeoutError: tool 'wait' did not finish within 0.5 s$/);
});

test("invalid arguments are -32602 naming the field", async () => {
  for (const [name, args, field] of [
    ["move", { p: { x: "far" } }, /arguments\.p\.x: expected number, got string/],
    ["add", {}, /arguments\.a: is required/],
    ["mix", { colors: ["red", "mauve"] }, /arguments\.colors\[1\]: expected one of "red", "green", "blue"/],
    ["greet", { name: "x", extra: 1 }, /arguments\.extra: is not an accepted property/],
  ]) {
    await assert.rejects(
      client.callTool({ name, arguments: args }),
      (err) => err instanceof McpError && err.code === ErrorCode.InvalidParams && field.test(err.message),
      `${name} ${JSON.stringify(args)}`,
    );
  }
});

test("an unknown tool is -32602", async () => {
  await assert.rejects(
    client.callTool({ name: "nope", arguments: {} }),
    (err) => err instanceof McpError && err.code === ErrorCode.InvalidParams && /unknown tool 'nope'/.test(err.message),
  );
});

test("ping", async () => {
  assert.deepEqual(await client.ping(), {});
});
