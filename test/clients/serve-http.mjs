// Starts `forge serve --http` on a port the kernel picks and resolves to
// { server, url, headers } once forge logs its URL; rejects if it exits
// first or says nothing within a minute. headers carry the local token forge
// made (<state_dir>/http-token, named in the same log line) when no other
// token is configured. Shared by the HTTP tests.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";

// tokenHeaders reads the local token file that forge's log line names, if any.
export function tokenHeaders(log) {
  const m = log.match(/token_file=(\S+)/);
  if (!m || m[1] === '""') return {};
  return { Authorization: `Bearer ${readFileSync(m[1], "utf8").trim()}` };
}

export function serveHTTP(forge, args = []) {
  const server = spawn(forge, ["--log-level", "info", "serve", ...args, "--http", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("forge serve did not report its URL:\n" + log)), 60000);
    server.stderr.on("data", (b) => {
      log += b;
      const m = log.match(/url=(http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ server, url: m[1], headers: tokenHeaders(log) });
      }
    });
    server.on("exit", (code) => reject(new Error(`forge serve exited ${code}:\n${log}`)));
  });
}
