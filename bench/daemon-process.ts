import { execFileSync } from "node:child_process";
import path from "node:path";
import { type EmbeddedRedis, freePort, startEmbeddedRedis } from "../src/redis/embedded.js";
import { type NodeChild, ROOT, spawnNode } from "./child.js";
import { sleep } from "./stats.js";

/** A Tributary daemon running as its own `node` process (its event loop is not the load generator's). */
export interface DaemonProcess {
  readonly url: string;
  /** The ROLES it runs (after BENCH_DAEMON_ENV overrides). */
  readonly roles: readonly string[];
  readonly child: NodeChild;
  stop(): Promise<void>;
}

export interface DaemonProcessOptions {
  /** REDIS_URL; unused with `redisClusterNodes`. */
  readonly redisUrl: string;
  /** REDIS_CLUSTER_NODES ("host:port,..."): the daemon runs on this Redis Cluster instead (no REDIS_URL). */
  readonly redisClusterNodes?: string;
  readonly adminToken: string;
  /** ROLES; default every role. */
  readonly roles?: string;
  readonly env?: Record<string, string>;
  /** Readiness check for a process without the api role (no /readyz to poll). */
  readonly ready?: (pid: number) => Promise<boolean>;
  /** The checkout to run (its dist/); default BENCH_DAEMON_ROOT or this one. */
  readonly root?: string;
  /** Extra node flags, after BENCH_DAEMON_NODE_FLAGS's. */
  readonly flags?: readonly string[];
  /** Runs the daemon under another program (bench/instructions.ts: valgrind); see `spawnNode`. */
  readonly wrapper?: readonly string[];
  /** How long start-up may take (default 60 s; far longer under valgrind). */
  readonly startTimeoutMs?: number;
}

/** BENCH_DAEMON_ENV="K=V,K2=V2": extra daemon settings (e.g. DELIVERY_CONCURRENCY=128) for experiments. */
function extraEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of (process.env.BENCH_DAEMON_ENV ?? "").split(",")) {
    const i = pair.indexOf("=");
    if (i > 0) out[pair.slice(0, i).trim()] = pair.slice(i + 1).trim();
  }
  return out;
}

const TSX_DAEMON = process.env.BENCH_DAEMON_TSX === "1";

/** Compiles the daemon (`npm run build`) in the checkout the bench runs it from. */
export function buildDaemon(root = process.env.BENCH_DAEMON_ROOT || ROOT): void {
  if (TSX_DAEMON) return;
  execFileSync(process.execPath, [path.join(ROOT, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.build.json"], {
    cwd: root,
    stdio: "inherit",
  });
}

/** Starts the compiled daemon (`node --no-node-snapshot dist/src/main.js`) and waits for /readyz. */
export async function startDaemonProcess(opts: DaemonProcessOptions, name = "daemon"): Promise<DaemonProcess> {
  const port = await freePort();
  // BENCH_CPU_PROF=<dir> writes a V8 CPU profile of each daemon process there on exit.
  const prof = process.env.BENCH_CPU_PROF ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_CPU_PROF] : [];
  // BENCH_DAEMON_ROOT=<dir> runs the daemon from another checkout (A/B-testing a change).
  const root = opts.root ?? (process.env.BENCH_DAEMON_ROOT || ROOT);
  const env: Record<string, string> = {
    PORT: String(port),
    HOST: "127.0.0.1",
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    ...(opts.redisClusterNodes ? { REDIS_CLUSTER_NODES: opts.redisClusterNodes } : { REDIS_URL: opts.redisUrl }),
    ADMIN_TOKEN: opts.adminToken,
    ALLOW_PRIVATE_DESTINATIONS: "true",
    LOG_LEVEL: "warn",
    DELIVERY_RETRY_SCHEDULE: "1s,2s",
    SHUTDOWN_TIMEOUT_MS: "5000",
    ROLES: opts.roles ?? "api,worker,scheduler",
    // One user drives every phase: a per-user ingress rate that never binds, still taken per
    // emit, so the numbers include what the check costs.
    INGRESS_EVENTS_PER_SECOND_PER_USER: "1000000000",
    INGRESS_BURST_EVENTS_PER_USER: "1000000000",
    ...opts.env,
    ...extraEnv(),
  };
  // BENCH_DAEMON_NODE_FLAGS="--trace-gc ...": extra node flags for the daemon (see BENCH_CHILD_LOG).
  const flags = [...(process.env.BENCH_DAEMON_NODE_FLAGS ?? "").split(" ").filter(Boolean), ...(opts.flags ?? [])];
  // The compiled daemon, as `npm start` runs it (see buildDaemon); BENCH_DAEMON_TSX=1 runs the
  // TypeScript sources through tsx instead (its transform wraps every closure in a naming helper).
  const child = TSX_DAEMON
    ? spawnNode(name, ["--no-node-snapshot", ...prof, ...flags, "--import", "tsx"], "src/main.ts", [], env, root, opts.wrapper)
    : spawnNode(name, ["--no-node-snapshot", ...prof, ...flags], "dist/src/main.js", [], env, root, opts.wrapper);
  const url = `http://127.0.0.1:${port}`;
  const startTimeoutMs = opts.startTimeoutMs ?? 60_000;
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    const gone = child.exited();
    if (gone) throw new Error(`${name} exited during start-up (${JSON.stringify(gone)}):\n${child.tail()}`);
    const ok = opts.ready
      ? await opts.ready(child.pid).catch(() => false)
      : await fetch(`${url}/readyz`)
          .then(async (r) => {
            await r.arrayBuffer();
            return r.status === 200;
          })
          .catch(() => false);
    if (ok) break;
    if (Date.now() > deadline) {
      await child.stop(2000);
      throw new Error(`${name} not ready within ${startTimeoutMs / 1000} s:\n${child.tail()}`);
    }
    await sleep(200);
  }
  return { url, roles: (env.ROLES ?? "").split(",").map((r) => r.trim()), child, stop: () => child.stop() };
}

/** Minimal JSON client for setup calls (admin API, webhooks, subscriptions). */
export async function api(
  base: string,
  token: string,
  method: string,
  path: string,
  json?: unknown,
): Promise<{ status: number; body: unknown }> {
  const res = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(json === undefined ? {} : { "content-type": "application/json" }) },
    body: json === undefined ? undefined : JSON.stringify(json),
  });
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = text;
  }
  return { status: res.status, body };
}

/** Calls `api` and throws unless the status is `expect`; returns `body.data`. */
export async function apiData<T>(base: string, token: string, method: string, path: string, json: unknown, expect: number): Promise<T> {
  const r = await api(base, token, method, path, json);
  if (r.status !== expect) throw new Error(`${method} ${path}: expected ${expect}, got ${r.status} ${JSON.stringify(r.body)}`);
  return (r.body as { data: T }).data;
}

/** Creates a paid user through the admin API (the bench's, the A/B's, the promise count's); returns its API key. */
export async function createPaidUser(base: string, adminToken: string, username: string): Promise<string> {
  const user = await apiData<{ api_key: string }>(
    base,
    adminToken,
    "POST",
    "/admin/users",
    { username, email: `${username}@example.com`, plan: "paid" },
    201,
  );
  return user.api_key;
}

/** A daemon on a Redis of its own, with one paid user: what the side-by-side scripts load. */
export interface EmitDaemon {
  readonly daemon: DaemonProcess;
  readonly redis: EmbeddedRedis;
  /** The paid user's API key. */
  readonly key: string;
  /** Stops the daemon, then its Redis. */
  stop(): Promise<void>;
}

/**
 * Starts a Redis, a daemon on it and a paid user (`bench/ab-ingest.ts`, `bench/allocations.ts`).
 * Each daemon of such a script has a Redis of its own: on a shared one, the first daemon would hold
 * the leases (timers, housekeeping, the queue monitor) and pay for that work in its measurements.
 */
export async function startEmitDaemon(opts: Omit<DaemonProcessOptions, "redisUrl">, name: string, username: string): Promise<EmitDaemon> {
  const redis = await startEmbeddedRedis();
  let daemon: DaemonProcess | undefined;
  try {
    daemon = await startDaemonProcess({ ...opts, redisUrl: redis.url }, name);
    const key = await createPaidUser(daemon.url, opts.adminToken, username);
    const started = daemon;
    return {
      daemon,
      redis,
      key,
      async stop() {
        await started.stop();
        await redis.close();
      },
    };
  } catch (err) {
    await daemon?.stop().catch(() => undefined);
    await redis.close().catch(() => undefined);
    throw err;
  }
}

/**
 * What the phases run against: one full daemon, or (BENCH_SPLIT=1) an API process plus a
 * worker+scheduler process sharing the Redis, as ROLES allows.
 */
export interface Deployment {
  readonly url: string;
  /** Process name ("daemon", or "api" and "worker") -> pid, for the CPU meter. */
  readonly pids: Readonly<Record<string, number>>;
  /** The process running fan-out and delivery, if any. */
  readonly workerPid: number | undefined;
  readonly hasWorker: boolean;
  /** Throws when a process of the deployment died. */
  ensureAlive(): void;
  peakRssKb(): Record<string, number | undefined>;
  stop(): Promise<void>;
}

export async function startDeployment(opts: {
  redisUrl: string;
  adminToken: string;
  split: boolean;
  /** Extra daemon settings for every process of the deployment. */
  env?: Record<string, string>;
  /** True once a worker-only process with this pid is consuming (used only when split). */
  workerReady: (pid: number) => Promise<boolean>;
}): Promise<Deployment> {
  const base = { redisUrl: opts.redisUrl, adminToken: opts.adminToken, ...(opts.env ? { env: opts.env } : {}) };
  const named: [string, DaemonProcess][] = [];
  try {
    if (opts.split) {
      named.push(["worker", await startDaemonProcess({ ...base, roles: "worker,scheduler", ready: opts.workerReady }, "worker")]);
      named.push(["api", await startDaemonProcess({ ...base, roles: "api" }, "api")]);
    } else {
      named.push(["daemon", await startDaemonProcess(base, "daemon")]);
    }
  } catch (err) {
    await Promise.all(named.map(([, d]) => d.stop()));
    throw err;
  }
  const http = named.find(([, d]) => d.roles.includes("api"))?.[1];
  const worker = named.find(([, d]) => d.roles.includes("worker"))?.[1];
  return {
    url: http?.url ?? "",
    pids: Object.fromEntries(named.map(([n, d]) => [n, d.child.pid])),
    workerPid: worker?.child.pid,
    hasWorker: worker !== undefined,
    ensureAlive() {
      for (const [n, d] of named) {
        const gone = d.child.exited();
        if (gone) throw new Error(`${n} process crashed (${JSON.stringify(gone)}):\n${d.child.tail()}`);
      }
    },
    peakRssKb: () => Object.fromEntries(named.map(([n, d]) => [n, d.child.peakRssKb()])),
    async stop() {
      const deadBefore = new Set(named.filter(([, d]) => d.child.exited()).map(([n]) => n));
      await Promise.all(named.map(([, d]) => d.stop()));
      for (const [n, d] of named) {
        const gone = d.child.exited();
        if (gone && gone.code !== 0 && !deadBefore.has(n))
          process.stderr.write(`note: ${n} exited with ${JSON.stringify(gone)} on SIGTERM:\n${d.child.tail()}\n`);
      }
    },
  };
}
