import { type ChildProcess, spawn } from "node:child_process";
import { Redis } from "ioredis";

/**
 * A `redis-server` process of a test deployment (test/helpers/sentinel.ts, cluster.ts): started
 * with `args`, its last 200 output lines kept for failure messages, SIGKILLed by a process-exit hook
 * if the test worker goes away before the test stops it.
 */
export interface RedisNodeProcess {
  readonly pid: number;
  /** Sends a signal (SIGKILL waits for the exit). */
  signal(sig: NodeJS.Signals): Promise<void>;
  exited(): boolean;
  /** The last lines the process printed. */
  log(): string;
}

const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const c of live) c.kill("SIGKILL");
});

export function spawnRedisNode(args: readonly string[], name: string): RedisNodeProcess {
  const child = spawn("redis-server", args, { stdio: ["ignore", "pipe", "pipe"] });
  if (child.pid === undefined) throw new Error(`${name}: spawn failed`);
  live.add(child);
  const lines: string[] = [];
  const collect = (chunk: Buffer) => {
    for (const l of chunk.toString("utf8").split("\n")) if (l.trim()) lines.push(`[${name}] ${l}`);
    while (lines.length > 200) lines.shift();
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  let done = false;
  const exit = new Promise<void>((resolve) =>
    child.once("exit", () => {
      done = true;
      live.delete(child);
      resolve();
    }),
  );
  return {
    pid: child.pid,
    exited: () => done,
    log: () => lines.join("\n"),
    async signal(sig) {
      if (done) return;
      child.kill(sig);
      if (sig === "SIGKILL") await exit;
    },
  };
}

/** One short-lived admin connection to a node: no retries, bounded timeouts, closed after `fn`. */
export async function onRedisNode<T>(
  port: number,
  fn: (r: Redis) => Promise<T>,
  opts: { password?: string | undefined; connectTimeoutMs?: number; commandTimeoutMs?: number } = {},
): Promise<T> {
  const r = new Redis({
    port,
    host: "127.0.0.1",
    password: opts.password,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: opts.connectTimeoutMs ?? 1000,
    commandTimeout: opts.commandTimeoutMs ?? 2000,
  });
  r.on("error", () => {});
  try {
    await r.connect();
    return await fn(r);
  } finally {
    r.disconnect();
  }
}
