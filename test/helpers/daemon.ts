import { randomBytes } from "node:crypto";
import path from "node:path";
import { loadConfig } from "../../src/config/load.js";
import { startDaemon, type Daemon } from "../../src/daemon.js";
import { createLogger } from "../../src/observability/logger.js";
import { freePort } from "../../src/redis/embedded.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "./redis.js";

export interface TestDaemon {
  readonly url: string;
  readonly prefix: string;
  readonly adminToken: string;
  readonly daemon: Daemon;
  /** Creates a user through the admin API; returns its id and key and a bound client. */
  createUser(plan?: "free" | "paid"): Promise<{ id: string; api_key: string; api: Client }>;
  close(): Promise<void>;
}

export interface Reply {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: test code reads arbitrary JSON bodies.
  body: any;
  text: string;
}

export interface Client {
  request(
    method: string,
    path: string,
    opts?: { query?: Record<string, unknown>; json?: unknown; body?: string; headers?: Record<string, string> },
  ): Promise<Reply>;
  get(path: string, opts?: { query?: Record<string, unknown> }): Promise<Reply>;
  post(
    path: string,
    opts?: { query?: Record<string, unknown>; json?: unknown; body?: string; headers?: Record<string, string> },
  ): Promise<Reply>;
  put(path: string, opts?: { query?: Record<string, unknown>; json?: unknown }): Promise<Reply>;
  del(path: string, opts?: { query?: Record<string, unknown> }): Promise<Reply>;
}

/** A plain HTTP client for the daemon; `key` becomes the Bearer token. */
export function client(base: string, key?: string): Client {
  const request: Client["request"] = async (method, p, opts = {}) => {
    const url = new URL(p.startsWith("http") ? p : base + p);
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (key) headers.authorization = `Bearer ${key}`;
    let body = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers["content-type"] ??= "application/json";
    }
    const res = await fetch(url, { method, headers, body, redirect: "manual" });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, body: parsed, text };
  };
  return {
    request,
    get: (p, o) => request("GET", p, o),
    post: (p, o) => request("POST", p, o),
    put: (p, o) => request("PUT", p, o),
    del: (p, o) => request("DELETE", p, o),
  };
}

/**
 * Starts a whole daemon in-process on a free loopback port, under its own Redis key prefix, with
 * test-friendly settings (short retry schedule, private destinations allowed, 1 s timer minimum).
 */
export async function startTestDaemon(env: Record<string, string> = {}): Promise<TestDaemon> {
  const port = await freePort();
  const prefix = testPrefix();
  const adminToken = `admin-${randomBytes(8).toString("hex")}`;
  const config = loadConfig({
    PORT: String(port),
    HOST: "127.0.0.1",
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    REDIS_KEY_PREFIX: prefix,
    ADMIN_TOKEN: adminToken,
    ALLOW_PRIVATE_DESTINATIONS: "true",
    DELIVERY_RETRY_SCHEDULE: "100ms,200ms,400ms",
    DELIVERY_TIMEOUT_MS: "2000",
    TIMER_MIN_INTERVAL_SECONDS: "1",
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "silent",
    SHUTDOWN_TIMEOUT_MS: "3000",
    ...env,
  });
  const daemon = await startDaemon({
    config,
    logger: createLogger(config.logLevel),
    redisUrl: redisUrl(),
    registryDir: path.resolve(import.meta.dirname, "../../registry"),
  });
  const url = `http://127.0.0.1:${daemon.port}`;
  const admin = client(url, adminToken);
  return {
    url,
    prefix,
    adminToken,
    daemon,
    async createUser(plan = "free") {
      const tag = randomBytes(5).toString("hex");
      const res = await admin.post("/admin/users", { json: { username: `u${tag}`, email: `u${tag}@example.com`, plan } });
      if (res.status !== 201) throw new Error(`create user: ${res.status} ${res.text}`);
      const { id, api_key } = res.body.data as { id: string; api_key: string };
      return { id, api_key, api: client(url, api_key) };
    },
    async close() {
      await daemon.close();
      const redis = connectRedis();
      await dropPrefix(redis, prefix);
      redis.disconnect();
    },
  };
}
