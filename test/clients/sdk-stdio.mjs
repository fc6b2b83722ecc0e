// The official TypeScript SDK client against `forge serve` over stdio.
//
// Usage: FORGE_BIN=FORGE_BINARY node --test sdk-stdio.mjs
// Environment: FORGE_STATE_DIR (a state dir with forge/python:3.11 and
// forge/python-data:3.13 imported), passed on to forge.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError, ErrorCode } from "@modelcontextprotocol/sdk/types.js";

const forge = process.argv[2] ?? process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test sdk-stdio.mjs");
const DATA_IMAGE = process.env.FORGE_DATA_IMAGE ?? "forge/python-data:3.13";

async function connect() {
  const transport = new StdioClientTransport({
    command: forge,
    args: ["serve"],
    env: { ...process.env },
    stderr: "inherit",
  });
  const client = new Client({ name: "forge-sdk-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const client = await connect();
test.after(() => client.close());

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

test("initialize: instructions and capabilities", () => {
  const caps = client.getServerCapabilities();
  assert.ok(caps.tools && caps.resources && caps.logging, JSON.stringify(caps));
  const instructions = client.getInstructions();
  assert.match(instructions, /Stateless/);
  assert.match(instructions, /matplotlib/);
});

test("tools/list: execute_python with schemas and annotations", async () => {
  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === "execute_python");
  assert.ok(tool, JSON.stringify(tools.map((t) => t.name)));
  assert.deepEqual(tool.inputSchema.required, ["code"]);
  assert.equal(tool.outputSchema.type, "object");
  assert.equal(tool.annotations.readOnlyHint, false);
  assert.equal(tool.annotations.openWorldHint, false);
  assert.match(tool.description, /at most/);
});

test("print(1)", async () => {
  const res = await client.callTool({ name: "execute_python", arguments: { code: "print(1)" } });
  assert.notEqual(res.isError, true, text(res));
  assert.equal(res.structuredContent.stdout, "1\n");
  assert.equal(res.structuredContent.success, true);
  assert.match(text(res), /stdout:\n1/);
});

test("a failing cell is a tool error with the traceback", async () => {
  const res = await client.callTool({
    name: "execute_python",
    arguments: { code: "x = 1\nraise RuntimeError('nope')" },
  });
  assert.equal(res.isError, true);
  assert.equal(res.structuredContent.error.type, "RuntimeError");
  assert.match(text(res), /line 2/);
});

test("a limit above the maximum is a tool error naming it", async () => {
  const res = await client.callTool({ name: "execute_python", arguments: { code: "1", timeout: 100000 } });
  assert.equal(res.isError, true);
  assert.match(text(res), /max_timeout/);
});

test("malformed arguments are a protocol error (invalid params)", async () => {
  await assert.rejects(
    client.callTool({ name: "execute_python", arguments: { code: 42 } }),
    (err) => err instanceof McpError && err.code === ErrorCode.InvalidParams,
  );
});

test("a matplotlib plot in the data image comes back as an image", async () => {
  const res = await client.callTool({
    name: "execute_python",
    arguments: {
      custom_image: DATA_IMAGE,
      timeout: 60,
      code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')",
    },
  });
  assert.notEqual(res.isError, true, text(res));
  const images = res.content.filter((c) => c.type === "image");
  assert.equal(images.length, 1, JSON.stringify(res.content.map((c) => c.type)));
  assert.equal(images[0].mimeType, "image/png");
  assert.equal(Buffer.from(images[0].data, "base64").subarray(1, 4).toString(), "PNG");
});

test("resources: list and read", async () => {
  const { resources } = await client.listResources();
  const uris = resources.map((r) => r.uri).sort();
  // ui://forge/result.html is the MCP App that renders execute_python results.
  assert.deepEqual(uris, ["forge://environment/info", "forge://environments/list", "forge://tools/available", "ui://forge/result.html"]);
  const info = JSON.parse((await client.readResource({ uri: "forge://environment/info" })).contents[0].text);
  assert.equal(info.default_image.present, true);
  assert.ok(info.limits.max_timeout_s > 0);
  const list = JSON.parse((await client.readResource({ uri: "forge://environments/list" })).contents[0].text);
  assert.ok(list.images.some((i) => i.name === "forge/python:3.11"), JSON.stringify(list));
  const tools = JSON.parse((await client.readResource({ uri: "forge://tools/available" })).contents[0].text);
  assert.deepEqual(tools.tools, []);
});

test("logging/setLevel", async () => {
  await client.setLoggingLevel("debug");
});
