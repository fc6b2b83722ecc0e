// Spawn → initialized with the official TypeScript SDK client: forge serve
// beside an mcp-go sample server (testdata/mcpserver), interleaved in one
// run so that both see the same machine. Prints one JSON object with the
// medians and their ratio (issue 16's target: forge ≤ 1.0 × the sample),
// and the same for spawn → the first tools/list answered (the "_list"
// fields): forge answers initialize from its first initializers
// (cmd/forge/internal/early), tools/list from its server once main runs.
//
// Usage: node bench-connect.mjs FORGE_BINARY MCPSERVER_BINARY [SPAWNS [BASELINE_FORGE]]
// With BASELINE_FORGE (another build of forge), it is interleaved too, and
// the output adds its median and ratio: a change measured beside the build
// before it, in the same run.
// Exit 1 when FORGE_BENCH_STRICT=1 and the ratio is above 1.0.
import { performance } from "node:perf_hooks";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [forge, sample] = process.argv.slice(2, 4);
const spawns = Number(process.argv[4] ?? 30);
const baseline = process.argv[5];
if (!forge || !sample) {
  console.error("usage: node bench-connect.mjs FORGE_BINARY MCPSERVER_BINARY [SPAWNS]");
  process.exit(2);
}

async function connectOnce(command, args) {
  const t0 = performance.now();
  const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "ignore" });
  const client = new Client({ name: "forge-bench-connect", version: "1" });
  await client.connect(transport); // initialize + notifications/initialized
  const ms = performance.now() - t0;
  await client.listTools();
  const listMs = performance.now() - t0;
  const pid = transport.pid;
  await client.close();
  // Wait until the server has exited (untimed): a forge still shutting down
  // would load the machine, and hold the image store's lock, during the
  // next spawn.
  for (const deadline = performance.now() + 30000; performance.now() < deadline;) {
    try {
      process.kill(pid, 0);
    } catch {
      return [ms, listMs];
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${command} (pid ${pid}) did not exit within 30 s of close`);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

const servers = { forge: [forge, ["serve"]], mcp_go_sample: [sample, []] };
if (baseline) servers.baseline = [baseline, ["serve"]];
const times = Object.fromEntries(Object.keys(servers).map((k) => [k, []]));
const lists = Object.fromEntries(Object.keys(servers).map((k) => [k, []]));
for (const s of Object.values(servers)) await connectOnce(...s); // warm the page cache
for (let i = 0; i < spawns; i++) {
  for (const [name, [cmd, args]] of i % 2 ? Object.entries(servers).reverse() : Object.entries(servers)) {
    const [ms, listMs] = await connectOnce(cmd, args);
    times[name].push(ms);
    lists[name].push(listMs);
  }
}
const out = {
  spawns,
  forge_median_ms: +median(times.forge).toFixed(2),
  mcp_go_sample_median_ms: +median(times.mcp_go_sample).toFixed(2),
};
out.ratio = +(out.forge_median_ms / out.mcp_go_sample_median_ms).toFixed(3);
out.forge_list_median_ms = +median(lists.forge).toFixed(2);
out.mcp_go_sample_list_median_ms = +median(lists.mcp_go_sample).toFixed(2);
out.list_ratio = +(out.forge_list_median_ms / out.mcp_go_sample_list_median_ms).toFixed(3);
if (baseline) {
  out.baseline_median_ms = +median(times.baseline).toFixed(2);
  out.baseline_ratio = +(out.baseline_median_ms / out.mcp_go_sample_median_ms).toFixed(3);
  out.baseline_list_median_ms = +median(lists.baseline).toFixed(2);
  out.baseline_list_ratio = +(out.baseline_list_median_ms / out.mcp_go_sample_list_median_ms).toFixed(3);
}
console.log(JSON.stringify(out));
if (process.env.FORGE_BENCH_STRICT === "1" && out.ratio > 1.0) process.exit(1);
