import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, expect } from "vitest";
import { QUEUES } from "../../src/queue/catalog.js";
import { createKeys } from "../../src/store/keys.js";
import { outboxLength } from "../../src/store/outbox-stream.js";
import { type Client, startTestDaemon, type TestDaemon } from "./daemon.js";
import { type AnswerFn, type ReceivedRequest, type Receiver, startReceiver, waitFor } from "./receiver.js";
import { connectRedis } from "./redis.js";

/**
 * The shared harness of the end-to-end delivery tests (SPEC §6): an in-process daemon with real
 * Redis, real BullMQ and a real loopback receiver. Where a test asserts that something did NOT
 * arrive, it first waits for the daemon to be quiet (`quiet`: outbox drained, no job waiting,
 * active or delayed), so the absence is a fact rather than the result of a long enough sleep.
 * The daemon runs with DELIVERY_RETRY_SCHEDULE=100ms,200ms,400ms: 4 attempts per delivery.
 */
export interface Harness {
  td: TestDaemon;
  redis: Redis;
  queue: Queue;
}

export async function harness(env: Record<string, string> = {}): Promise<Harness> {
  const td = await startTestDaemon(env);
  const redis = connectRedis();
  const queue = new Queue(QUEUES.delivery, { connection: redis.duplicate(), prefix: createKeys(td.prefix).queuePrefix("delivery") });
  return { td, redis, queue };
}

export async function closeHarness(h: Harness | undefined): Promise<void> {
  if (!h) return;
  await h.queue.close();
  await h.td.close();
  h.redis.disconnect();
}

/**
 * Waits until nothing is left to deliver: the outbox is empty (entries are deleted only once
 * their direct first attempts settled and their jobs exist) and no delivery job is waiting,
 * active or delayed; twice in a row.
 */
export async function quiet(h: Harness): Promise<void> {
  const keys = createKeys(h.td.prefix);
  let calm = 0;
  await waitFor(
    async () => {
      const [len, counts] = await Promise.all([
        outboxLength(h.redis, keys),
        h.queue.getJobCounts("wait", "active", "delayed", "prioritized", "waiting-children"),
      ]);
      const busy = len + Object.values(counts).reduce((a, b) => a + b, 0);
      calm = busy === 0 ? calm + 1 : 0;
      return calm >= 2;
    },
    { timeoutMs: 15_000, intervalMs: 50, what: "the daemon to finish every delivery" },
  );
}

// The receiver answers per path; each test registers its own paths.
export const answers = new Map<string, AnswerFn>();
export let rx: Receiver;
export let h: Harness;

let pathCounter = 0;
/** A fresh receiver path, answered by `answer` (default 200). */
export function hookPath(name: string, answer?: AnswerFn): string {
  const p = `/${name}-${++pathCounter}`;
  if (answer) answers.set(p, answer);
  return p;
}

export const workflowId = (): string => `p_${randomBytes(6).toString("hex")}`;

export async function createWebhook(api: Client, url: string): Promise<{ id: string; signing_secret: string }> {
  const res = await api.post("/v1/webhooks", { json: { url, name: "test" } });
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

export async function subscribe(api: Client, emitter: string, listener: string, eventName?: string): Promise<void> {
  const res = await api.post("/v1/subscriptions", {
    json: { emitter_id: emitter, listener_id: listener, ...(eventName === undefined ? {} : { event_name: eventName }) },
  });
  expect(res.status, res.text).toBe(200);
}

export async function emit(api: Client, workflow: string, event: unknown, name?: string): Promise<string> {
  const res = await api.post(`/v1/workflows/${workflow}/events`, { json: { event, ...(name === undefined ? {} : { name }) } });
  expect(res.status, res.text).toBe(202);
  return res.body.data.id;
}

export interface DeliveryView {
  id: string;
  event_id: string;
  emitter_id: string;
  event_name: string;
  status: "pending" | "delivered" | "failed";
  attempts: { attempt: number; at: string; status_code: number | null; duration_ms: number; error: string | null }[];
  created_at: number;
  updated_at: number;
}

export async function deliveries(api: Client, webhookId: string, query: Record<string, unknown> = {}) {
  const res = await api.get(`/v1/webhooks/${webhookId}/deliveries`, { query });
  expect(res.status, res.text).toBe(200);
  return res.body as {
    data: DeliveryView[];
    page_info: { total_count: number; count: number; start_cursor: string | null; end_cursor: string | null };
  };
}

/** Polls the attempt log until the webhook's only delivery has `status`. */
export async function onlyDelivery(api: Client, webhookId: string, status: DeliveryView["status"]): Promise<DeliveryView> {
  return waitFor(
    async () => {
      const { data } = await deliveries(api, webhookId);
      return data.length === 1 && data[0]?.status === status ? data[0] : undefined;
    },
    { what: `the delivery of ${webhookId} to be ${status}` },
  );
}

export const headersOf = (r: ReceivedRequest): Record<string, string> =>
  Object.fromEntries(Object.entries(r.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")]));

export const arrived = (path: string, n: number) =>
  rx.waitFor((r) => (r.to(path).length >= n ? r.to(path) : undefined), { what: `${n} request(s) at ${path}` });

// ---------------------------------------------------------------------------------------------

export function ownHarness(env: Record<string, string>): () => Harness {
  let own: Harness | undefined;
  beforeAll(async () => {
    own = await harness(env);
  });
  afterAll(async () => {
    await closeHarness(own);
  });
  return () => own as Harness;
}

/** Registers a test file's hooks: one loopback receiver (`rx`, answering per path from `answers`) and one daemon (`h`). */
/**
 * Daemon settings that keep every webhook's circuit closed (SPEC §12 circuit breaker), for tests of
 * something else that make a webhook fail many times in a row.
 */
export const NO_CIRCUIT: Readonly<Record<string, string>> = { CIRCUIT_FAILURE_THRESHOLD: "1000000" };

export function installDeliveryHarness(env: Record<string, string> = {}): void {
  beforeAll(async () => {
    rx = await startReceiver((req) => (answers.get(req.path.split("?")[0] ?? "") ?? (() => ({ status: 200 })))(req));
    h = await harness(env);
  });
  afterAll(async () => {
    await closeHarness(h);
    await rx?.close();
  });
}
