// The MCP inspector CLI (@modelcontextprotocol/inspector-cli, --cli mode)
// against `forge serve` over stdio: tools/list, tools/call and resources.
//
// Usage: FORGE_BIN=FORGE_BINARY node --test inspector-cli.mjs
// The inspector is run from its own build/ folder, as it expects.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

const forge = resolve(process.argv[2] ?? process.env.FORGE_BIN ?? "");
assert.ok(process.argv[2] ?? process.env.FORGE_BIN, "usage: FORGE_BIN=FORGE_BINARY node --test inspector-cli.mjs");
const require = createRequire(import.meta.url);
const buildDir = dirname(require.resolve("@modelcontextprotocol/inspector-cli/build/cli.js"));

async function inspector(...args) {
  const { stdout } = await promisify(execFile)(process.execPath, [join(buildDir, "cli.js"), "--cli", forge, "serve", ...args], {
    cwd: buildDir,
    env: process.env,
    timeout: 120_000,
    maxBuffer: 16 << 20,
  });
  return JSON.parse(stdout.slice(stdout.indexOf("{")));
}

test("tools/list", async () => {
  const res = await inspector("--method", "tools/list");
  const tool = res.tools.find((t) => t.name === "execute_python");
  assert.ok(tool, JSON.stringify(res));
  assert.ok(tool.outputSchema && tool.annotations);
});

test("tools/call print(1)", async () => {
  const res = await inspector("--method", "tools/call", "--tool-name", "execute_python", "--tool-arg", "code=print(1)");
  assert.notEqual(res.isError, true, JSON.stringify(res));
  assert.equal(res.structuredContent.stdout, "1\n");
});

test("tools/call with a failing cell reports isError", async () => {
  const res = await inspector("--method", "tools/call", "--tool-name", "execute_python", "--tool-arg", "code=1/0");
  assert.equal(res.isError, true, JSON.stringify(res));
  assert.equal(res.structuredContent.error.type, "ZeroDivisionError");
});

test("resources/read forge://environment/info", async () => {
  const res = await inspector("--method", "resources/read", "--uri", "forge://environment/info");
  const info = JSON.parse(res.contents[0].text);
  assert.ok(info.forge_version && info.limits);
});
