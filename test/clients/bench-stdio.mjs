// Latency of `forge serve` over stdio as a client sees it: process spawn →
// initialized, tools/list round trip and a warm execute_python print(1)
// round trip. Measured twice: with a minimal JSON-RPC client (newline-
// delimited JSON on the child's pipes; what the server costs) and with the
// official TypeScript SDK client (adds the SDK's own work, e.g. compiling
// the tools' output schemas with ajv on every tools/list). Prints one JSON
// object.
//
// Usage: node bench-stdio.mjs FORGE_BINARY [SPAWNS] [ROUND_TRIPS]
// Exit 1 when the targets are missed by the minimal client:
// spawn → initialized median ≤ 50 ms, tools/list median ≤ 1 ms.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const forge = process.argv[2];
const spawns = Number(process.argv[3] ?? 20);
const trips = Number(process.argv[4] ?? 200);
if (!forge) {
  console.error("usage: node bench-stdio.mjs FORGE_BINARY [SPAWNS] [ROUND_TRIPS]");
  process.exit(2);
}

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { n: s.length, median_ms: +q(0.5).toFixed(3), p95_ms: +q(0.95).toFixed(3), p99_ms: +q(0.99).toFixed(3), min_ms: +s[0].toFixed(3) };
};

// RawClient speaks newline-delimited JSON-RPC to a spawned forge.
class RawClient {
  constructor() {
    this.child = spawn(forge, ["serve"], { stdio: ["pipe", "pipe", "ignore"], env: process.env });
    this.pending = new Map();
    this.nextId = 1;
    createInterface({ input: this.child.stdout }).on("line", (line) => {
      const msg = JSON.parse(line);
      const p = this.pending.get(msg.id);
      if (p) {
        this.pending.delete(msg.id);
        msg.error ? p.reject(new Error(JSON.stringify(msg.error))) : p.resolve(msg.result);
      }
    });
  }
  request(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  }
  notify(method) {
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method }) + "\n");
  }
  async initialize() {
    await this.request("initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "forge-bench", version: "1" },
    });
    this.notify("notifications/initialized");
  }
  close() {
    this.child.stdin.end();
    return new Promise((resolve) => this.child.on("exit", resolve));
  }
}

async function measure(open, list, exec) {
  const init = [];
  for (let i = 0; i < spawns; i++) {
    const t0 = performance.now();
    const c = await open();
    init.push(performance.now() - t0);
    await c.close();
  }
  const c = await open();
  const lists = [];
  for (let i = 0; i < trips; i++) {
    const t0 = performance.now();
    await list(c);
    lists.push(performance.now() - t0);
  }
  // Paced as an agent loop paces its calls (the model thinks between them):
  // the pool has refilled before each, so these are warm runs end to end.
  const execs = [];
  for (let i = 0; i < Math.min(trips, 50); i++) {
    await new Promise((r) => setTimeout(r, 150));
    const t0 = performance.now();
    const res = await exec(c);
    execs.push(performance.now() - t0);
    if (res.isError) throw new Error("print(1) failed: " + JSON.stringify(res.content));
  }
  // Back to back: the pool runs dry after its size and the rest start cold.
  const burst = [];
  for (let i = 0; i < Math.min(trips, 50); i++) {
    const t0 = performance.now();
    const res = await exec(c);
    burst.push(performance.now() - t0);
    if (res.isError) throw new Error("print(1) failed: " + JSON.stringify(res.content));
  }
  await c.close();
  return {
    spawn_to_initialized: stats(init),
    tools_list_round_trip: stats(lists),
    execute_print1_round_trip: stats(execs),
    execute_print1_back_to_back: stats(burst),
  };
}

const call = { name: "execute_python", arguments: { code: "print(1)" } };
const raw = await measure(
  async () => {
    const c = new RawClient();
    await c.initialize();
    return c;
  },
  (c) => c.request("tools/list"),
  (c) => c.request("tools/call", call),
);
const sdk = await measure(
  async () => {
    const transport = new StdioClientTransport({ command: forge, args: ["serve"], env: { ...process.env }, stderr: "ignore" });
    const client = new Client({ name: "forge-bench", version: "1.0.0" });
    await client.connect(transport);
    return client;
  },
  (c) => c.listTools(),
  (c) => c.callTool(call),
);

console.log(JSON.stringify({ minimal_client: raw, typescript_sdk: sdk }, null, 2));
const failures = [];
if (raw.spawn_to_initialized.median_ms > 50) failures.push("spawn → initialized median above 50 ms");
if (raw.tools_list_round_trip.median_ms > 1) failures.push("tools/list median above 1 ms");
for (const [name, r] of [["minimal client", raw], ["TypeScript SDK", sdk]]) {
  const e = r.execute_print1_round_trip;
  if (e.median_ms > 3 + (name === "TypeScript SDK" ? 2 : 0)) failures.push(`${name}: warm execute_python median above target`);
}
if (failures.length) {
  console.error("benchmark targets missed: " + failures.join("; "));
  process.exit(1);
}
