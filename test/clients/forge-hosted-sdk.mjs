// The official TypeScript SDK client against `forge serve --tools
// sdk/python/examples/demo.py`: hosted tools listed beside execute_python,
// every call run by forge in a sandbox.
//
// Usage: FORGE_BIN=FORGE_BINARY node --test forge-hosted-sdk.mjs
// Environment: FORGE_STATE_DIR (a state dir with forge/python:3.11).
import assert from "node:assert/strict";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const demo = join(root, "sdk/python/examples/demo.py");
const forge = process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test forge-hosted-sdk.mjs");

const transport = new StdioClientTransport({
  command: forge,
  args: ["serve", "--tools", demo],
  env: { ...process.env },
  stderr: "inherit",
});
const client = new Client({ name: "forge-hosted-sdk-test", version: "1.0.0" });
await client.connect(transport);
test.after(() => client.close());

test("hosted tools are listed beside execute_python", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const n of ["execute_python", "add", "greet", "divide"]) assert.ok(names.includes(n), `${n} in ${names}`);
  const add = tools.find((t) => t.name === "add");
  assert.equal(add.inputSchema.type, "object");
  assert.ok(add.outputSchema, "add has an outputSchema");
});

test("a call returns structuredContent and text", async () => {
  const r = await client.callTool({ name: "add", arguments: { a: 2, b: 3 } });
  assert.ok(!r.isError, JSON.stringify(r));
  assert.deepEqual(r.structuredContent, { result: 5 });
  assert.equal(r.content[0].text, "5");
});

test("an exception is an isError result with its type and message", async () => {
  const r = await client.callTool({ name: "divide", arguments: { a: 1, b: 0 } });
  assert.equal(r.isError, true);
  assert.match(r.content[0].text, /ZeroDivisionError/);
});

test("invalid arguments are -32602", async () => {
  await assert.rejects(
    client.callTool({ name: "add", arguments: { a: "two" } }),
    (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams && /\/a/.test(e.message),
  );
});
