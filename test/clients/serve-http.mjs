// Starts `forge serve --http` on a port the kernel picks and resolves to
// { server, url } once forge logs its URL; rejects if it exits first or
// says nothing within a minute. Shared by the HTTP tests.
import { spawn } from "node:child_process";

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
        resolve({ server, url: m[1] });
      }
    });
    server.on("exit", (code) => reject(new Error(`forge serve exited ${code}:\n${log}`)));
  });
}
