import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { waitFor } from "./receiver.js";
import { redisAnswersPing } from "../../src/redis/embedded.js";

/**
 * Real processes for durability tests: the daemon as `node --import tsx src/main.ts` children and
 * private `redis-server`s, each killable with any signal. Every child started here is tracked, so
 * `killAll()` in afterEach/afterAll leaves nothing running even when a test fails half-way; a
 * process-exit hook SIGKILLs whatever is left if the test worker itself goes away.
 */

const PROJECT_ROOT = path.resolve(import.meta.dirname, "../..");
/** Lines of output kept per child for failure messages. */
const LOG_LINES = 400;

const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const c of live) c.kill("SIGKILL");
});

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Child {
  readonly name: string;
  readonly pid: number;
  /** Resolves when the process has exited. */
  readonly exited: Promise<Exit>;
  /** True once the process has exited. */
  hasExited(): boolean;
  /** The last lines of stdout and stderr, interleaved. */
  logs(): string;
  /** Sends `signal` (default SIGKILL) and waits for the exit. Idempotent once exited. */
  kill(signal?: NodeJS.Signals): Promise<Exit>;
}

function track(name: string, child: ChildProcess): Child {
  if (child.pid === undefined) throw new Error(`${name}: spawn failed`);
  live.add(child);
  const lines: string[] = [];
  const collect = (stream: string) => (chunk: Buffer) => {
    for (const line of chunk.toString("utf8").split("\n")) {
      if (line.trim() === "") continue;
      lines.push(`[${name} ${stream}] ${line}`);
      if (lines.length > LOG_LINES) lines.shift();
    }
  };
  child.stdout?.on("data", collect("out"));
  child.stderr?.on("data", collect("err"));
  let exit: Exit | undefined;
  const exited = new Promise<Exit>((resolve) => {
    child.once("exit", (code, signal) => {
      exit = { code, signal };
      live.delete(child);
      resolve(exit);
    });
  });
  return {
    name,
    pid: child.pid,
    exited,
    hasExited: () => exit !== undefined,
    logs: () => lines.join("\n"),
    async kill(signal: NodeJS.Signals = "SIGKILL") {
      if (exit) return exit;
      child.kill(signal);
      return exited;
    },
  };
}

/** SIGKILLs every child still running (afterEach/afterAll). */
export async function killAll(): Promise<void> {
  const waits: Promise<unknown>[] = [];
  for (const c of [...live]) {
    waits.push(new Promise((resolve) => c.once("exit", resolve)));
    c.kill("SIGKILL");
  }
  await Promise.all(waits);
}

/** Environment of children: only what Node needs, never the test runner's own settings. */
function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of ["PATH", "HOME", "TMPDIR", "LANG", "SYSTEMROOT"]) {
    const v = process.env[k];
    if (v !== undefined) env[k] = v;
  }
  return env;
}

export interface DaemonChild extends Child {
  readonly roles: string;
  /** `http://127.0.0.1:$PORT` (meaningful when the process runs the api role). */
  readonly url: string;
}

/**
 * Spawns the daemon as an operator would run it (`node --no-node-snapshot --import tsx src/main.ts`)
 * with `env` on top of a minimal environment. Does not wait for readiness; see `waitForReady`.
 * `processGroup`: the daemon leads a process group of its own (as a job started from a terminal).
 */
export function spawnDaemon(name: string, env: Record<string, string>, opts: { processGroup?: boolean } = {}): DaemonChild {
  const child = spawn(process.execPath, ["--no-node-snapshot", "--import", "tsx", "src/main.ts"], {
    cwd: PROJECT_ROOT,
    env: { ...baseEnv(), ...env },
    stdio: ["ignore", "pipe", "pipe"],
    // A group of its own, as a terminal's foreground job: `process.kill(-pid, signal)` reaches it and its children.
    detached: opts.processGroup === true,
  });
  const tracked = track(name, child);
  return { ...tracked, roles: env.ROLES ?? "api,worker,scheduler", url: `http://127.0.0.1:${env.PORT ?? "3000"}` };
}

/**
 * Runs a TypeScript file of this project in its own Node process (`node --no-node-snapshot
 * --import tsx <script> ...args`), so that a crash there (a signal) shows as the child's exit status
 * instead of taking the test worker down.
 */
export function spawnScript(name: string, script: string, env: Record<string, string>, args: readonly string[] = []): Child {
  const child = spawn(process.execPath, ["--no-node-snapshot", "--import", "tsx", script, ...args], {
    cwd: PROJECT_ROOT,
    env: { ...baseEnv(), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return track(name, child);
}

/** Waits until `GET /readyz` answers 200; fails at once, with the child's logs, if it exits first. */
export async function waitForReady(d: DaemonChild, timeoutMs = 30_000): Promise<void> {
  await waitFor(
    async () => {
      if (d.hasExited()) throw new Error(`${d.name} exited before it was ready:\n${d.logs()}`);
      const res = await fetch(`${d.url}/readyz`).catch(() => undefined);
      return res?.status === 200;
    },
    { timeoutMs, intervalMs: 100, what: `${d.name} /readyz` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\n--- ${d.name} logs ---\n${d.logs()}`);
  });
}

/**
 * Waits until `probe` holds while the child keeps running; for processes without HTTP (ROLES=worker),
 * whose readiness is observed in Redis.
 */
export async function waitWhileRunning<T>(d: Child, probe: () => Promise<T>, what: string, timeoutMs = 30_000): Promise<void> {
  await waitFor(
    async () => {
      if (d.hasExited()) throw new Error(`${d.name} exited: ${d.logs()}`);
      return probe();
    },
    { timeoutMs, intervalMs: 100, what },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\n--- ${d.name} logs ---\n${d.logs()}`);
  });
}

export interface RedisChild extends Child {
  readonly port: number;
  readonly url: string;
}

/**
 * A private `redis-server` with append-only persistence in `dir` and `appendfsync` as given, on
 * `port`; resolves once it answers PING (after replaying the AOF when one exists).
 */
export async function startRedisServer(opts: {
  dir: string;
  port: number;
  appendfsync: "always" | "everysec";
  name?: string;
}): Promise<RedisChild> {
  mkdirSync(opts.dir, { recursive: true });
  const args = ["--port", String(opts.port), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "yes"];
  args.push("--dir", opts.dir, "--appendonly", "yes", "--appendfsync", opts.appendfsync);
  const child = spawn("redis-server", args, { stdio: ["ignore", "pipe", "pipe"] });
  const tracked = track(opts.name ?? "redis", child);
  await waitFor(
    async () => {
      if (tracked.hasExited()) throw new Error(`redis-server exited:\n${tracked.logs()}`);
      return redisAnswersPing(opts.port);
    },
    { timeoutMs: 15_000, intervalMs: 50, what: `redis-server on port ${opts.port}` },
  );
  return { ...tracked, port: opts.port, url: `redis://127.0.0.1:${opts.port}` };
}

/** Creates a user through the admin API of a daemon child; returns its API key. */
export async function createUserKey(d: DaemonChild, adminToken: string): Promise<string> {
  const tag = Math.random().toString(16).slice(2, 10);
  const res = await fetch(`${d.url}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ username: `u${tag}`, email: `u${tag}@example.com` }),
  });
  if (res.status !== 201) throw new Error(`create user: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: { api_key: string } }).data.api_key;
}

/** One JSON request to a daemon child's API with `key`; the body parsed (null when empty). */
export async function childApi(
  d: DaemonChild,
  key: string,
  method: string,
  path: string,
  body?: unknown,
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are read field by field.
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${d.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text === "" ? null : JSON.parse(text) };
}
