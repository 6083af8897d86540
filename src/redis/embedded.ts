import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import type { Logger } from "../observability/logger.js";
import { type DataDirLock, embeddedUrlFile, lockDataDir, prepareDataDir, serverPidFile, stopLeftoverServer } from "./data-dir.js";
import { spawnWatchedServer, type WatchedServer } from "./watchdog.js";

export { DataDirInUseError, embeddedUrlFile } from "./data-dir.js";

export interface EmbeddedRedis {
  /** `redis://:<password>@127.0.0.1:<port>`: the password is part of the URL. */
  readonly url: string;
  readonly port: number;
  readonly password: string;
  /** The running redis-server's pid (a restart changes it); undefined while none runs. */
  readonly pid: number | undefined;
  /** Stops the server (clean shutdown, SIGKILL after the grace period) and releases the data directory. Idempotent. */
  close(): Promise<void>;
}

/** What to do when the server dies unexpectedly. Without it, a dead server stays dead. */
export interface RestartPolicy {
  /** Restarts allowed within `windowMs`; one more death gives up. */
  readonly maxRestarts: number;
  readonly windowMs: number;
  /** Called once when the policy gives up (the owner should exit non-zero); the server is not restarted. */
  readonly onGiveUp: (err: Error) => void;
}

export interface EmbeddedRedisOptions {
  /** Directory for the append-only file; undefined = no persistence. */
  readonly dir?: string;
  /** Port to listen on; default a free loopback port. */
  readonly port?: number;
  /** How long to wait for the server to answer. */
  readonly startTimeoutMs?: number;
  readonly restart?: RestartPolicy;
  readonly logger?: Logger;
}

export class RedisServerMissingError extends Error {}

/** Grace period of a clean shutdown before SIGKILL. */
const STOP_GRACE_MS = 10_000;
/** Pause before a restart: a crash loop must not spin. */
const RESTART_DELAY_MS = 500;

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

/** How long `redisAnswersPing` waits for an answer. */
const PING_ANSWER_MS = 500;

/**
 * True when a Redis on 127.0.0.1:`port` answers PING (after AUTH with `password`) within half a
 * second; false otherwise, always within that time: also when the connection is closed without
 * an answer (a server killed after it read the PING closes it cleanly, with no error and no data,
 * and a closed socket's idle time-out never fires).
 */
export function redisAnswersPing(port: number, password?: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: "127.0.0.1" });
    let got = "";
    let settled = false;
    const done = (ok: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), PING_ANSWER_MS);
    sock.once("connect", () => sock.write(`${password ? `AUTH ${password}\r\n` : ""}PING\r\n`));
    sock.on("data", (d) => {
      got += d.toString();
      if (got.includes("+PONG")) done(true);
      else if (got.includes("-")) done(false);
    });
    sock.once("error", () => done(false));
    sock.once("close", () => done(false));
  });
}

/**
 * Starts a private `redis-server` on loopback, protected by a random password, under a watchdog
 * that stops it when this process dies (`watchdog.ts`), and waits until it answers. With `dir`,
 * the append-only file lives there: the directory is locked to this process (`data-dir.ts`), a
 * server a killed predecessor left running is stopped first, and the URL is written (0600) for the
 * CLI. With `restart`, a server that dies is started again on the same port, password and files.
 */
export async function startEmbeddedRedis(opts: EmbeddedRedisOptions = {}): Promise<EmbeddedRedis> {
  if (!redisServerOnPath()) {
    throw new RedisServerMissingError("no redis-server on PATH: install Redis (apt-get install redis-server) or set REDIS_URL");
  }
  const dir = opts.dir === undefined ? undefined : path.resolve(opts.dir);
  let lock: DataDirLock | undefined;
  if (dir) {
    prepareDataDir(dir);
    lock = lockDataDir(dir);
    try {
      const stopped = await stopLeftoverServer(dir);
      if (stopped) opts.logger?.warn({ pid: stopped, dir }, "stopped an embedded redis-server left running by a previous tributary");
    } catch (err) {
      lock.release();
      throw err;
    }
  }
  const port = opts.port ?? (await freePort());
  // Hex: safe in a URL and in redis.conf syntax without quoting rules.
  const password = randomBytes(24).toString("hex");
  // noeviction: a full Redis refuses new writes instead of evicting queued work.
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "yes", "--maxmemory-policy", "noeviction"];
  if (dir) args.push("--dir", dir, "--pidfile", serverPidFile(dir), "--appendonly", "yes", "--appendfsync", "always");
  else args.push("--appendonly", "no");
  // Replaying a large append-only file takes a while; the wait ends early if the server exits.
  const startTimeoutMs = opts.startTimeoutMs ?? (dir ? 60_000 : 10_000);

  let server: WatchedServer;
  try {
    server = await startServer(args, port, password, startTimeoutMs);
  } catch (err) {
    lock?.release();
    throw err;
  }
  let pid: number | undefined = await server.serverPid;
  const url = `redis://:${password}@127.0.0.1:${port}`;
  const urlFile = dir ? embeddedUrlFile(dir) : undefined;
  if (urlFile) writeFileSync(urlFile, `${url}\n`, { mode: 0o600 });

  let closed = false;
  const deaths: number[] = [];
  /** Waits for the current server to exit; restarts it per the policy unless we are closing. */
  const supervise = async (): Promise<void> => {
    let how = await server.exited;
    for (;;) {
      pid = undefined;
      const policy = opts.restart;
      if (closed || !policy) return;
      const now = Date.now();
      deaths.push(now);
      while ((deaths[0] ?? now) < now - policy.windowMs) deaths.shift();
      opts.logger?.error({ port, exit: how, log: server.log() }, "the embedded redis-server is down");
      if (deaths.length > policy.maxRestarts) {
        policy.onGiveUp(
          new Error(`the embedded redis-server went down ${deaths.length} times within ${policy.windowMs} ms (last: ${how})`),
        );
        return;
      }
      await new Promise((r) => setTimeout(r, RESTART_DELAY_MS));
      if (closed) return;
      try {
        server = await startServer(args, port, password, startTimeoutMs);
      } catch (err) {
        // A failed restart counts as another death; the policy decides whether to try again.
        how = (err as Error).message;
        continue;
      }
      if (closed) return server.stop(STOP_GRACE_MS);
      pid = await server.serverPid;
      opts.logger?.warn({ port, pid, restarts: deaths.length }, "restarted the embedded redis-server");
      how = await server.exited;
    }
  };
  // A fault of the loop itself must not leave a dead server unwatched: it is a give-up.
  const supervising = supervise().catch((err: unknown) => {
    if (!closed) opts.restart?.onGiveUp(err instanceof Error ? err : new Error(String(err)));
  });

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    password,
    get pid() {
      return pid;
    },
    close() {
      closed = true;
      closing ??= (async () => {
        await server.stop(STOP_GRACE_MS);
        // A restart may have been under way: the loop stops what it started before returning.
        await supervising;
        if (urlFile) rmSync(urlFile, { force: true });
        lock?.release();
      })();
      return closing;
    },
  };
}

/** One server process, answering PING, or an error carrying its last log lines. */
async function startServer(args: readonly string[], port: number, password: string, timeoutMs: number): Promise<WatchedServer> {
  const server = spawnWatchedServer(args, password);
  const deadline = Date.now() + timeoutMs;
  while (!(await redisAnswersPing(port, password))) {
    if (server.hasExited() || Date.now() > deadline) {
      await server.stop(0);
      const log = server.log();
      throw new Error(`redis-server did not start on port ${port}${log ? `:\n${log}` : ""}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return server;
}
