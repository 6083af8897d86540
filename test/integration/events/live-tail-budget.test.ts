import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/wait.js";
import { emit, workflowId } from "../api/support.js";

/**
 * The live tail's memory budget (SPEC §9) against a whole daemon on loopback: a client that opens a
 * stream and stops reading is disconnected once the bytes the daemon holds for it pass
 * SSE_MAX_BUFFERED_BYTES_PER_STREAM (or all streams together pass
 * SSE_MAX_BUFFERED_BYTES_PER_PROCESS), resumes with Last-Event-ID without losing an event, and
 * another user's tail keeps its pace meanwhile.
 */

const STREAM_BUDGET = 1024 * 1024;
const PROCESS_BUDGET = 1536 * 1024;
/** Each event's payload: every frame is a little over this. */
const EVENT_BYTES = 100 * 1024;
/** The streams keep the latest 100 events: the test stays within them so that a resume loses nothing. */
const MAX_EMITS = 90;

const opened: { close(): void }[] = [];
afterAll(() => {
  for (const o of opened) o.close();
});

/** A stream read with node:http, whose response can be paused (the socket stops being read). */
function paused(td: TestDaemon, path: string, key: string, lastEventId?: string) {
  let text = "";
  let closed = false;
  let res: http.IncomingMessage | undefined;
  const req = http.get(`${td.url}${path}`, {
    agent: false,
    headers: { authorization: `Bearer ${key}`, ...(lastEventId ? { "last-event-id": lastEventId } : {}) },
  });
  const head = new Promise<http.IncomingMessage>((resolve, reject) => {
    req.once("response", (r) => {
      res = r;
      r.setEncoding("utf8");
      r.on("data", (chunk: string) => {
        text += chunk;
      });
      r.once("close", () => {
        closed = true;
      });
      r.on("error", () => {});
      resolve(r);
    });
    req.once("error", reject);
  });
  req.on("error", () => {
    closed = true;
  });
  const handle = {
    head,
    text: () => text,
    closed: () => closed,
    pause: () => res?.pause(),
    resume: () => res?.resume(),
    /** Ids of the complete frames read so far, in order. */
    ids: () => [...text.matchAll(/^id: (\S+)\ndata: [^\n]*\n\n/gm)].map((m) => m[1] as string),
    close: () => req.destroy(),
  };
  opened.push(handle);
  return handle;
}

async function metric(td: TestDaemon, name: string): Promise<number> {
  const text = (await client(td.url).get("/metrics")).text;
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? Number.NaN : Number(line.slice(name.length + 1));
}

const ended = (td: TestDaemon, reason: string) =>
  metric(td, `tributary_sse_streams_ended_total{reason="${reason}"}`).then((n) => (Number.isNaN(n) ? 0 : n));

/** A second user's tail: each emit's time to its frame on the stream. */
async function bystander(td: TestDaemon) {
  const v = await td.createUser();
  const wf = workflowId();
  await emit(v.api, wf, { warm: true });
  const s = paused(td, `/v1/workflows/${wf}/sse`, v.api_key);
  expect((await s.head).statusCode).toBe(200);
  const latencies: number[] = [];
  return {
    latencies,
    async probe(): Promise<void> {
      const t0 = performance.now();
      const id = await emit(v.api, wf, { probe: latencies.length });
      await waitFor(() => s.ids().includes(id), { what: "the bystander's event on its tail", timeoutMs: 10_000, intervalMs: 5 });
      latencies.push(performance.now() - t0);
    },
    close: () => s.close(),
  };
}

const big = (n: number) => ({ n, big: "x".repeat(EVENT_BYTES) });

/** A daemon for one describe block, with the live-tail settings `env` (started before its tests). */
function daemonFor(env: Record<string, string>): () => TestDaemon {
  let td: TestDaemon | undefined;
  beforeAll(async () => {
    td = await startTestDaemon({ SSE_HEARTBEAT_SECONDS: "1", INGRESS_EVENTS_PER_SECOND_PER_USER: "0", ...env });
  });
  afterAll(async () => {
    await td?.close();
  });
  return () => td as TestDaemon;
}

/**
 * Emits large events to `wf` (at most MAX_EMITS) until a stream is ended for `reason`, probing the
 * bystander's tail every ten; returns the ids emitted and the most bytes the daemon held meanwhile.
 */
async function emitUntilCut(td: TestDaemon, api: Client, wf: string, reason: string, other: { probe(): Promise<void> }) {
  const cutBefore = await ended(td, reason);
  const emitted: string[] = [];
  let held = 0;
  await waitFor(
    async () => {
      if ((await ended(td, reason)) > cutBefore) return true;
      if (emitted.length >= MAX_EMITS) return false;
      emitted.push(await emit(api, wf, big(emitted.length)));
      held = Math.max(held, await metric(td, "tributary_sse_buffered_bytes"));
      if (emitted.length % 10 === 0) await other.probe();
      return false;
    },
    { what: `a stream ended for ${reason} within ${MAX_EMITS} emits`, timeoutMs: 60_000, intervalMs: 1 },
  );
  return { emitted, held };
}

/** The user whose streams stop reading, their workflow, and another user watching their own tail. */
async function tenants(td: TestDaemon) {
  const u = await td.createUser();
  const wf = workflowId();
  await emit(u.api, wf, { warm: true });
  return { u, wf, other: await bystander(td) };
}

describe("live tail byte budget per stream", { timeout: 180_000 }, () => {
  const daemon = daemonFor({ SSE_MAX_BUFFERED_BYTES_PER_STREAM: String(STREAM_BUDGET) });

  it("disconnects a stream that stops reading once it holds more than its budget; the client resumes losing nothing", async () => {
    const td = daemon();
    const { u, wf, other } = await tenants(td);

    const s = paused(td, `/v1/workflows/${wf}/sse`, u.api_key);
    expect((await s.head).statusCode).toBe(200);
    await waitFor(() => s.text().includes(":sse-handshake"), { what: "the stream open" });
    // From here on the client reads nothing: the kernel's buffers fill, then the daemon's.
    s.pause();
    const { emitted, held } = await emitUntilCut(td, u.api, wf, "stream_bytes", other);
    // What the daemon held never went far past the budget (one frame over it at most), and the cut
    // stream's bytes are released.
    expect(held).toBeLessThan(STREAM_BUDGET + 4 * EVENT_BYTES);
    await waitFor(async () => (await metric(td, "tributary_sse_buffered_bytes")) < 4 * EVENT_BYTES, { what: "the held bytes released" });

    // More events after the cut; then the client reads what reached it and resumes after the last
    // complete event it read.
    for (let i = 0; i < 5; i++) emitted.push(await emit(u.api, wf, big(emitted.length)));
    s.resume();
    await waitFor(() => s.closed(), { what: "the cut stream to end on the client", timeoutMs: 20_000 });
    const read = s.ids();
    expect(read.length).toBeLessThan(emitted.length);
    expect(read).toEqual(emitted.slice(0, read.length));
    const resumed = paused(td, `/v1/workflows/${wf}/sse`, u.api_key, read[read.length - 1]);
    expect((await resumed.head).statusCode).toBe(200);
    const last = emitted[emitted.length - 1] as string;
    await waitFor(() => resumed.ids().includes(last), { what: "the resumed stream to reach the last event", timeoutMs: 20_000 });
    expect([...read, ...resumed.ids()]).toEqual(emitted);
    resumed.close();

    // The other user's emits reached their tail in well under a second throughout.
    for (let i = 0; i < 3; i++) await other.probe();
    expect(other.latencies.length).toBeGreaterThanOrEqual(3);
    expect(Math.max(...other.latencies)).toBeLessThan(1000);
    other.close();
  });
  it("replays a resume larger than the budget to a reading client without cutting it", async () => {
    const td = daemon();
    const u = await td.createUser();
    const wf = workflowId();
    const from = await emit(u.api, wf, { warm: true });
    // Three times the stream budget is kept after `from`.
    const emitted: string[] = [];
    for (let i = 0; i < 30; i++) emitted.push(await emit(u.api, wf, big(i)));
    const cutBefore = await ended(td, "stream_bytes");
    const s = paused(td, `/v1/workflows/${wf}/sse`, u.api_key, from);
    expect((await s.head).statusCode).toBe(200);
    const last = emitted[emitted.length - 1] as string;
    await waitFor(() => s.ids().includes(last), { what: "the whole replay", timeoutMs: 20_000 });
    expect(s.ids()).toEqual(emitted);
    expect(s.closed()).toBe(false);
    expect(await ended(td, "stream_bytes")).toBe(cutBefore);
    s.close();
  });
});

describe("live tail byte budget per process", { timeout: 180_000 }, () => {
  const daemon = daemonFor({
    // Far above what the process may hold, so that only the process budget can cut.
    SSE_MAX_BUFFERED_BYTES_PER_STREAM: String(64 * 1024 * 1024),
    SSE_MAX_BUFFERED_BYTES_PER_PROCESS: String(PROCESS_BUDGET),
  });

  it("disconnects the largest paused streams once all streams together hold more than the process budget", async () => {
    const td = daemon();
    const { u, wf, other } = await tenants(td);
    const streams = [paused(td, `/v1/workflows/${wf}/sse`, u.api_key), paused(td, `/v1/workflows/${wf}/sse`, u.api_key)];
    for (const s of streams) {
      expect((await s.head).statusCode).toBe(200);
      await waitFor(() => s.text().includes(":sse-handshake"), { what: "the stream open" });
      s.pause();
    }
    const { held } = await emitUntilCut(td, u.api, wf, "process_bytes", other);
    expect(held).toBeLessThan(PROCESS_BUDGET + 4 * EVENT_BYTES);
    for (let i = 0; i < 3; i++) await other.probe();
    expect(Math.max(...other.latencies)).toBeLessThan(1000);
    other.close();
    for (const s of streams) s.close();
  });
});
