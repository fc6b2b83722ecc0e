// What sdk-streaming.mjs (stdio) and http-streaming.mjs (streamable HTTP)
// share: polling helpers, and the TypeScript SDK tests of progress and
// cancellation, which must hold the same over either transport.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls cond every 20 ms until it holds or ms pass; returns how long it took.
export async function within(ms, cond, what) {
  const t0 = performance.now();
  while (!(await cond())) {
    if (performance.now() - t0 > ms) assert.fail(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
  return performance.now() - t0;
}

// Whether a process whose command line holds marker runs on the host.
export const hostProcess = (marker) => {
  try {
    execFileSync("pgrep", ["-f", marker], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
};

export const stateDir = process.env.FORGE_STATE_DIR ?? "/var/lib/forge-test";

// Whether forge's audit log has an entry of event for which pred holds.
export const auditHas = (event, pred) => {
  const path = join(stateDir, "audit.log");
  if (!existsSync(path)) return false;
  return readFileSync(path, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
    .some((e) => e.event === event && pred(e));
};

// execute_python through client with the SDK's request options (timeout,
// signal, onprogress).
export const runner = (client) => (args, opts = {}) =>
  client.callTool({ name: "execute_python", arguments: args }, undefined, { timeout: 60000, ...opts });

// The SDK tests of issue 16 that hold over every transport: progress
// carrying a running call's output, and cancellation (a session survives it
// with its variables, a stateless sandbox is destroyed). label names the
// transport in the test names.
export function progressAndCancelTests(label, client) {
  const run = runner(client);

  test(`${label}: progress: a run printing every 0.3 s for 3 s streams its output in order`, async () => {
    const notes = [];
    const code = "import time\nfor i in range(10):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.3)";
    const res = await run({ code }, { onprogress: (p) => notes.push(p) });
    assert.notEqual(res.isError, true, JSON.stringify(res.content));
    assert.ok(notes.length >= 5, `got ${notes.length} progress notifications, want at least 5`);
    for (let i = 1; i < notes.length; i++) {
      assert.ok(notes[i].progress > notes[i - 1].progress, `progress not increasing: ${notes[i - 1].progress} then ${notes[i].progress}`);
      // At most every 250 ms, by the server's clock (progress is the elapsed time in seconds, in
      // whole milliseconds: compared as such, since 1.05 - 0.8 is 0.2499... in floats).
      const apart = Math.round(notes[i].progress * 1000) - Math.round(notes[i - 1].progress * 1000);
      assert.ok(apart >= 250, `notifications ${i - 1} and ${i} sent ${apart} ms apart`);
    }
    const streamed = notes.map((n) => n.message).join("");
    const ticks = [...streamed.matchAll(/tick (\d)/g)].map((m) => Number(m[1]));
    assert.ok(ticks.length >= 5, `streamed output ${JSON.stringify(streamed)} has fewer than 5 ticks`);
    assert.deepEqual(ticks, [...ticks].sort((a, b) => a - b), "ticks out of order");
    assert.ok(notes.at(-1).progress >= 1.5, `last progress ${notes.at(-1).progress} s, want the elapsed time`);
    assert.match(res.structuredContent.stdout, /tick 9/);
  });

  test(`${label}: cancel mid-run: the session survives with its variables`, async () => {
    const id = `cancel-${label.replace(/\W+/g, "-")}-${process.pid}`;
    let res = await run({ code: "kept = 42", session_id: id });
    assert.notEqual(res.isError, true, JSON.stringify(res.content));
    const ac = new AbortController();
    let started = false;
    const pending = run({ code: "import time\nprint('started', flush=True)\nwhile True: time.sleep(0.01)", session_id: id },
      { signal: ac.signal, onprogress: () => { started = true; } });
    await within(10000, () => started, "the run's first progress");
    ac.abort("the person pressed stop");
    await assert.rejects(pending, (err) => /abort|cancel|stop/i.test(String(err)));
    const t0 = performance.now();
    res = await run({ code: "kept + 1", session_id: id });
    const next = performance.now() - t0;
    assert.notEqual(res.isError, true, JSON.stringify(res.content));
    assert.equal(res.structuredContent.result, 43, JSON.stringify(res.structuredContent));
    console.log(`# ${label}, session: the call after a cancel answered in ${next.toFixed(0)} ms`);
    assert.ok(next < 1500, `the next call took ${next} ms: the cancelled run was not interrupted promptly`);
    await within(2000, () => auditHas("execution.cancel", (e) => e.session_id === id), "the audit log's execution.cancel");
    await client.callTool({ name: "destroy_session", arguments: { session_id: id } });
  });

  test(`${label}: cancel a stateless run: its sandbox is destroyed`, async () => {
    const marker = `sleep 4242.${process.pid}${label.length}`;
    const ac = new AbortController();
    const pending = run({ code: `import subprocess\nsubprocess.run(['sh', '-c', '${marker}'])` }, { signal: ac.signal });
    await within(15000, () => hostProcess(marker), "the sandbox's sleep on the host");
    const t0 = performance.now();
    ac.abort("stop");
    await assert.rejects(pending);
    const gone = await within(2000, () => !hostProcess(marker), "the sandbox's processes gone after cancel");
    console.log(`# ${label}, stateless: sandbox processes gone ${(performance.now() - t0).toFixed(0)} ms after the cancel (polled: ${gone.toFixed(0)} ms)`);
    // The server is fine and answers the next call.
    const res = await run({ code: "print('after')" });
    assert.equal(res.structuredContent.stdout, "after\n");
  });
}
