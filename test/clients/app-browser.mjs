// forge's MCP App (ui://forge/result.html) in headless Chromium, inside a
// minimal host built on the ext-apps package's AppBridge: the App runs in a
// sandboxed iframe (scripts only, opaque origin, as hosts load it), the
// bridge runs here in Node and speaks to it through the host page's
// postMessage. A real forge run (TypeScript SDK over stdio) produces the
// results: stdout, stderr, a matplotlib figure and a pandas DataFrame, then
// an exception. The test clicks a column header, asserts the sort order
// from the DOM, and writes screenshots to $FORGE_ARTIFACT_DIR (default a
// temp dir).
//
// Usage: FORGE_BIN=FORGE_BINARY [CHROMIUM=/usr/bin/chromium] node --test app-browser.mjs
import assert from "node:assert/strict";
import { test, before, after } from "node:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { AppBridge } from "@modelcontextprotocol/ext-apps/app-bridge";
import { chromium } from "playwright-core";

const forge = process.env.FORGE_BIN;
assert.ok(forge, "usage: FORGE_BIN=FORGE_BINARY node --test app-browser.mjs");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
const artifacts = process.env.FORGE_ARTIFACT_DIR || fs.mkdtempSync(path.join(os.tmpdir(), "forge-app-"));
fs.mkdirSync(artifacts, { recursive: true });

let client, browser, appHTML, runResult, errorResult;

before(async () => {
  const transport = new StdioClientTransport({ command: forge, args: ["serve"], env: { ...process.env }, stderr: "inherit" });
  client = new Client({ name: "forge-app-test", version: "1.0.0" });
  await client.connect(transport);
  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await client?.close();
});

// PageTransport carries the bridge's JSON-RPC messages to the App's iframe
// and back, through the host page (the Transport interface of the MCP SDK).
class PageTransport {
  constructor(page) { this.page = page; this.queue = []; }
  receive(msg) { this.onmessage ? this.onmessage(msg) : this.queue.push(msg); }
  async start() { for (const m of this.queue.splice(0)) this.onmessage?.(m); }
  async send(msg) {
    await this.page.evaluate((m) => document.getElementById("app").contentWindow.postMessage(m, "*"), msg);
  }
  async close() { this.onclose?.(); }
}

// show loads the App in a fresh host page and hands it result once it has
// initialized; it returns the page and the App's frame.
async function show(result, name) {
  const page = await browser.newPage({ viewport: { width: 900, height: 900 } });
  const transport = new PageTransport(page);
  await page.exposeFunction("__toHost", (m) => transport.receive(m));
  await page.setContent(`<!doctype html><body style="margin:0">
    <iframe id="app" sandbox="allow-scripts" style="width:100%;height:880px;border:0"></iframe>
    <script>
      const f = document.getElementById("app");
      window.addEventListener("message", (e) => { if (e.source === f.contentWindow) window.__toHost(e.data); });
    </script></body>`);
  const bridge = new AppBridge(null, { name: "forge-test-host", version: "1.0.0" }, {}, { hostContext: { theme: "light" } });
  const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
  await bridge.connect(transport);
  await page.evaluate((html) => { document.getElementById("app").srcdoc = html; }, appHTML);
  await initialized;
  await bridge.sendToolResult(result);
  const frame = page.frameLocator("#app");
  await frame.locator("#status").filter({ hasNotText: "waiting" }).waitFor();
  return { page, frame, shot: (suffix) => page.screenshot({ path: path.join(artifacts, `${name}-${suffix}.png`), fullPage: true }) };
}

test("execute_python links the App and forge serves it", async () => {
  const { tools } = await client.listTools();
  const exec = tools.find((t) => t.name === "execute_python");
  const uri = exec?._meta?.ui?.resourceUri;
  assert.equal(uri, "ui://forge/result.html", JSON.stringify(exec?._meta));
  const res = await client.readResource({ uri });
  assert.equal(res.contents[0].mimeType, "text/html;profile=mcp-app");
  appHTML = res.contents[0].text;
  assert.match(appHTML, /<html/);

  runResult = await client.callTool({ name: "execute_python", arguments: {
    custom_image: "forge/python-data:3.13",
    timeout: 240, // importing pandas and matplotlib takes 15 s and more on a loaded 2-core CI machine
    code: [
      "import sys, pandas as pd, matplotlib",
      "matplotlib.use('Agg')",
      "import matplotlib.pyplot as plt",
      "print('hello from stdout')",
      "print('careful: stderr', file=sys.stderr)",
      "plt.plot([1, 3, 2])",
      "pd.DataFrame({'name': ['b', 'c', 'a', 'd'], 'value': [10, 2, 33, 4]})",
    ].join("\n"),
  } });
  assert.notEqual(runResult.isError, true, JSON.stringify(runResult.content).slice(0, 2000));
  errorResult = await client.callTool({ name: "execute_python", arguments: { code: "def f():\n    return 1 / 0\nf()" } });
  assert.equal(errorResult.isError, true);
});

const columnTexts = (frame, col) => frame.locator(`table.dataframe tbody tr td:nth-child(${col})`).allTextContents();

test("the App shows output, a zoomable figure and a sortable DataFrame", async () => {
  assert.ok(runResult, "needs the forge run of the first test");
  const { page, frame, shot } = await show(runResult, "dataframe");
  try {
    assert.equal(await frame.locator("pre.stdout").textContent(), "hello from stdout\n");
    assert.match(await frame.locator("pre.stderr").textContent(), /careful: stderr/);
    const img = frame.locator("figure img").first();
    await img.waitFor();
    assert.ok(await img.evaluate((i) => i.complete && i.naturalWidth > 0), "the figure did not decode");
    await img.click();
    assert.equal(await frame.locator("figure").first().getAttribute("class"), "figure zoomed");
    await img.click();
    // Columns: index, name, value.
    assert.deepEqual(await columnTexts(frame, 3), ["10", "2", "33", "4"]);
    await shot("unsorted");
    const valueHeader = frame.locator("table.dataframe th", { hasText: "value" });
    await valueHeader.click();
    assert.equal(await valueHeader.getAttribute("aria-sort"), "ascending");
    assert.deepEqual(await columnTexts(frame, 3), ["2", "4", "10", "33"], "numeric ascending sort");
    assert.deepEqual(await columnTexts(frame, 2), ["c", "d", "b", "a"], "rows move with their value");
    await shot("sorted-ascending");
    await valueHeader.click();
    assert.deepEqual(await columnTexts(frame, 3), ["33", "10", "4", "2"], "numeric descending sort");
    await frame.locator("table.dataframe th", { hasText: "name" }).click();
    assert.deepEqual(await columnTexts(frame, 2), ["a", "b", "c", "d"], "text sort");
    await shot("sorted-by-name");
  } finally {
    await page.close();
  }
});

test("the App takes images referenced by index from content (compact structuredContent)", async () => {
  assert.ok(runResult, "needs the forge run of the first test");
  // The compact form: display images carry no bytes, only the index of
  // their ImageContent item in content ("content") and the MIME type; an
  // HTML item is clipped (truncated) and whole in its embedded resource.
  const compact = structuredClone(runResult);
  const images = compact.content.map((c, i) => [c, i]).filter(([c]) => c.type === "image");
  assert.ok(images.length > 0, "forge sent no ImageContent");
  const htmlAt = compact.content.findIndex((c) => c.type === "resource" && c.resource?.mimeType === "text/html");
  assert.ok(htmlAt >= 0, "forge sent the DataFrame's HTML as no embedded resource");
  let k = 0;
  compact.structuredContent.display = compact.structuredContent.display.map((d) => {
    if (d.mime_type.startsWith("image/") && d.mime_type !== "image/svg+xml") return { mime_type: d.mime_type, content: images[k++][1], bytes: 1 };
    if (d.mime_type === "text/html") return { mime_type: d.mime_type, content: htmlAt, data: d.data.slice(0, 40), truncated: true };
    return d;
  });
  assert.ok(!JSON.stringify(compact.structuredContent).includes(images[0][0].data), "bytes left in structuredContent");
  const { page, frame, shot } = await show(compact, "compact");
  try {
    const imgs = frame.locator("figure img");
    assert.equal(await imgs.count(), images.length, "each image once");
    assert.ok(await imgs.first().evaluate((i) => i.complete && i.naturalWidth > 0), "the referenced figure did not decode");
    assert.deepEqual(await columnTexts(frame, 3), ["10", "2", "33", "4"], "the whole table from the embedded resource");
    await shot("figure");
  } finally {
    await page.close();
  }
});

test("the App shows an error with its traceback", async () => {
  assert.ok(errorResult, "needs the forge run of the first test");
  const { page, frame, shot } = await show(errorResult, "error");
  try {
    assert.equal(await frame.locator("#status").textContent(), "failed");
    assert.match(await frame.locator(".error .title").textContent(), /^ZeroDivisionError: division by zero/);
    const tb = await frame.locator(".error pre.traceback").textContent();
    assert.match(tb, /line 2, in f/);
    await shot("traceback");
  } finally {
    await page.close();
  }
  console.log(`screenshots in ${artifacts}`);
});
