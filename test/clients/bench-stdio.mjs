// Latency of `forge serve` over stdio as a real client sees it (TypeScript SDK):
// process spawn → initialized, tools/list round trip, and a warm
// execute_python print(1) round trip. Prints one JSON object.
//
// Usage: node bench-stdio.mjs FORGE_BINARY [SPAWNS] [ROUND_TRIPS]
// Fails (exit 1) when the targets are missed: spawn → initialized
// median ≤ 50 ms and tools/list median ≤ 1 ms.
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
  return { n: s.length, median_ms: +q(0.5).toFixed(3), p95_ms: +q(0.95).toFixed(3), min_ms: +s[0].toFixed(3) };
};

async function spawnClient() {
  const transport = new StdioClientTransport({ command: forge, args: ["serve"], env: { ...process.env }, stderr: "ignore" });
  const client = new Client({ name: "forge-bench", version: "1.0.0" });
  const t0 = performance.now();
  await client.connect(transport);
  return { client, ms: performance.now() - t0 };
}

const init = [];
for (let i = 0; i < spawns; i++) {
  const { client, ms } = await spawnClient();
  init.push(ms);
  await client.close();
}

const { client } = await spawnClient();
const list = [];
for (let i = 0; i < trips; i++) {
  const t0 = performance.now();
  await client.listTools();
  list.push(performance.now() - t0);
}
const exec = [];
for (let i = 0; i < Math.min(trips, 50); i++) {
  const t0 = performance.now();
  const res = await client.callTool({ name: "execute_python", arguments: { code: "print(1)" } });
  exec.push(performance.now() - t0);
  if (res.isError) throw new Error("print(1) failed: " + JSON.stringify(res.content));
}
await client.close();

const out = {
  spawn_to_initialized: stats(init),
  tools_list_round_trip: stats(list),
  execute_print1_round_trip: stats(exec),
};
console.log(JSON.stringify(out, null, 2));
const failures = [];
if (out.spawn_to_initialized.median_ms > 50) failures.push("spawn → initialized median above 50 ms");
if (out.tools_list_round_trip.median_ms > 1) failures.push("tools/list median above 1 ms");
if (failures.length) {
  console.error("benchmark targets missed: " + failures.join("; "));
  process.exit(1);
}
