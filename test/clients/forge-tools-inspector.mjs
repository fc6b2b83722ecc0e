// The MCP inspector CLI (@modelcontextprotocol/inspector-cli, --cli mode)
// against `python3 -m forge_tools serve sdk/python/examples/demo.py`:
// tools/list and tools/call, a result and an error.
//
// Usage: node --test forge-tools-inspector.mjs
// Environment: PYTHON (default python3). The inspector is run from its own
// build/ folder, as it expects.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const sdk = join(root, "sdk/python");
const demo = join(sdk, "examples/demo.py");
const python = process.env.PYTHON ?? "python3";
const require = createRequire(import.meta.url);
const buildDir = dirname(require.resolve("@modelcontextprotocol/inspector-cli/build/cli.js"));

async function inspector(...args) {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [join(buildDir, "cli.js"), "--cli", python, "-m", "forge_tools", "serve", demo, ...args],
    { cwd: buildDir, env: { ...process.env, PYTHONPATH: sdk }, timeout: 120_000, maxBuffer: 16 << 20 },
  );
  return JSON.parse(stdout.slice(stdout.indexOf("{")));
}

test("tools/list", async () => {
  const res = await inspector("--method", "tools/list");
  assert.deepEqual(res.tools.map((t) => t.name), ["add", "greet", "summarize", "move", "mix", "divide", "wait", "chatty"]);
  const add = res.tools[0];
  assert.deepEqual(add.inputSchema.required, ["a"]);
  assert.equal(add.outputSchema.properties.result.type, "integer");
});

test("tools/call add", async () => {
  const res = await inspector("--method", "tools/call", "--tool-name", "add", "--tool-arg", "a=2", "b=40");
  assert.notEqual(res.isError, true, JSON.stringify(res));
  assert.deepEqual(res.structuredContent, { result: 42 });
});

test("tools/call with an object argument", async () => {
  const res = await inspector("--method", "tools/call", "--tool-name", "move", "--tool-arg", 'p={"x": 1, "y": 1}');
  assert.deepEqual(res.structuredContent, { x: 2, y: 2 });
});

test("tools/call that raises reports isError", async () => {
  const res = await inspector("--method", "tools/call", "--tool-name", "divide", "--tool-arg", "a=1", "b=0");
  assert.equal(res.isError, true, JSON.stringify(res));
  assert.equal(res.content[0].text, "ZeroDivisionError: float division by zero");
});
