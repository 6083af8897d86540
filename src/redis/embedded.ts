import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";

export interface EmbeddedRedis {
  readonly url: string;
  readonly port: number;
  readonly pid: number | undefined;
  /** Stops the server (SIGTERM, then SIGKILL after the deadline). Idempotent. */
  close(): Promise<void>;
}

export interface EmbeddedRedisOptions {
  /** Directory for the append-only file; undefined = no persistence. */
  readonly dir?: string;
  /** Port to listen on; default a free loopback port. */
  readonly port?: number;
  /** How long to wait for the server to answer. */
  readonly startTimeoutMs?: number;
}

export class RedisServerMissingError extends Error {}

/** Where a persistent embedded server records its URL, so the CLI can find it. */
export const embeddedUrlFile = (dir: string): string => path.join(dir, "redis.url");

/** True when a `redis-server` binary is on PATH. */
export function redisServerOnPath(): boolean {
  const r = spawnSync("redis-server", ["--version"], { stdio: "ignore" });
  return r.status === 0;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** True when a Redis on 127.0.0.1:`port` answers PING within half a second. */
export function redisAnswersPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: "127.0.0.1" });
    sock.setTimeout(500);
    sock.once("connect", () => sock.write("PING\r\n"));
    sock.once("data", (d) => {
      sock.destroy();
      resolve(d.toString().startsWith("+PONG"));
    });
    sock.once("error", () => resolve(false));
    sock.once("timeout", () => {
      sock.destroy();
      resolve(false);
    });
  });
}

/** Starts a private `redis-server` on loopback and waits until it answers PING. */
export async function startEmbeddedRedis(opts: EmbeddedRedisOptions = {}): Promise<EmbeddedRedis> {
  if (!redisServerOnPath()) {
    throw new RedisServerMissingError("no redis-server on PATH: install Redis (apt-get install redis-server) or set REDIS_URL");
  }
  const port = opts.port ?? (await freePort());
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "yes"];
  if (opts.dir) {
    const dir = path.resolve(opts.dir);
    mkdirSync(dir, { recursive: true });
    args.push("--dir", dir, "--appendonly", "yes", "--appendfsync", "always");
  } else {
    args.push("--appendonly", "no");
  }
  const child: ChildProcess = spawn("redis-server", args, { stdio: "ignore" });
  let exited = false;
  child.once("exit", () => {
    exited = true;
  });
  const deadline = Date.now() + (opts.startTimeoutMs ?? 10_000);
  while (!(await redisAnswersPing(port))) {
    if (exited || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`redis-server did not start on port ${port}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const url = `redis://127.0.0.1:${port}`;
  const urlFile = opts.dir ? embeddedUrlFile(path.resolve(opts.dir)) : undefined;
  if (urlFile) writeFileSync(urlFile, `${url}\n`);
  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    pid: child.pid,
    close() {
      closing ??= new Promise<void>((resolve) => {
        if (exited) return resolve();
        const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
        child.once("exit", () => {
          clearTimeout(timer);
          resolve();
        });
        child.kill("SIGTERM");
      });
      if (urlFile) rmSync(urlFile, { force: true });
      return closing;
    },
  };
}
