import { createServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { runCli } from "../../../src/cli/run.js";
import { killAll, spawnScript } from "../../helpers/process.js";

/**
 * `tributary healthcheck` (SPEC §11) against real HTTP servers on loopback ports picked at run
 * time: exit 0 only for a 200 from /readyz within 2 s, else exit 1 with one line on stderr.
 */

const servers: Server[] = [];

async function serve(handler: RequestListener): Promise<string> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A loopback port nothing listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Runs the command in-process; returns its exit code and what it wrote. */
async function healthcheck(argv: string[], env: NodeJS.ProcessEnv = {}) {
  let stdout = "";
  let stderr = "";
  const code = await runCli(["healthcheck", ...argv], env, {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
  });
  return { code, stdout, stderr };
}

const oneLine = (text: string) => text.endsWith("\n") && !text.slice(0, -1).includes("\n");

afterEach(async () => {
  await killAll();
});

afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
});

describe("tributary healthcheck", () => {
  it("exits 0 when /readyz answers 200, and asks for /readyz", async () => {
    const paths: string[] = [];
    const url = await serve((req, res) => {
      paths.push(req.url ?? "");
      res.writeHead(req.url === "/readyz" ? 200 : 404).end('{"status":"ready"}');
    });
    const r = await healthcheck(["--url", url]);
    expect(r).toEqual({ code: 0, stdout: "", stderr: "" });
    expect(paths).toEqual(["/readyz"]);
  });

  it("exits 1 naming the status when /readyz answers 503", async () => {
    const url = await serve((_req, res) => res.writeHead(503).end('{"error":"not ready","code":"not_ready"}'));
    const r = await healthcheck(["--url", url]);
    expect(r.code).toBe(1);
    expect(oneLine(r.stderr)).toBe(true);
    expect(r.stderr).toContain("503");
  });

  it("exits 1 within about 2.5 s when the server never answers", async () => {
    const url = await serve(() => {
      // Accepts the request and never answers.
    });
    const started = Date.now();
    const r = await healthcheck(["--url", url]);
    const elapsed = Date.now() - started;
    expect(r.code).toBe(1);
    expect(oneLine(r.stderr)).toBe(true);
    expect(r.stderr).toContain("no answer within 2000 ms");
    // It waits the whole 2 s (a lower bound a slow machine cannot break) and gives up soon after.
    expect(elapsed).toBeGreaterThanOrEqual(1900);
    expect(elapsed).toBeLessThan(4000);
  });

  it("exits 1 when the connection is refused", async () => {
    const port = await closedPort();
    const r = await healthcheck(["--url", `http://127.0.0.1:${port}`]);
    expect(r.code).toBe(1);
    expect(oneLine(r.stderr)).toBe(true);
    expect(r.stderr).toContain("connection refused");
  });

  it("exits 1 for a URL that is not http(s)", async () => {
    const r = await healthcheck(["--url", "ftp://127.0.0.1:21"]);
    expect(r.code).toBe(1);
    expect(oneLine(r.stderr)).toBe(true);
  });

  it("as a process: probes http://127.0.0.1:$PORT by default and sets the exit status", async () => {
    let status = 200;
    const url = await serve((_req, res) => res.writeHead(status).end());
    const port = new URL(url).port;
    // HOST=0.0.0.0 (the container's) is reached through loopback.
    const env = { PORT: port, HOST: "0.0.0.0" };
    const ok = spawnScript("hc-ok", "src/cli/main.ts", env, ["healthcheck"]);
    expect(await ok.exited).toEqual({ code: 0, signal: null });

    status = 503;
    const bad = spawnScript("hc-bad", "src/cli/main.ts", env, ["healthcheck"]);
    expect(await bad.exited).toEqual({ code: 1, signal: null });
    const errLines = bad
      .logs()
      .split("\n")
      .filter((l) => l.startsWith("[hc-bad err]"));
    expect(errLines).toHaveLength(1);
    expect(errLines[0]).toContain("503");
  });
});
