import net from "node:net";
import { EventSource } from "eventsource";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";
import { createSource, emit, expectStatus, type Json, NAMED_ONLY, seedSourceEvents, workflowId } from "../api/support.js";

/**
 * The live tail (SPEC §9) against a whole daemon on loopback and real Redis, read with the
 * `eventsource` npm client (as Pipedream's own example app does) and with raw HTTP where the exact
 * bytes matter.
 */

/** SSE_MAX_STREAMS_PER_USER of the test daemon. */
const LIMIT = 4;
let td: TestDaemon;
let redis: Redis;
const opened: { close(): void }[] = [];

beforeAll(async () => {
  td = await startTestDaemon({
    SSE_HEARTBEAT_SECONDS: "1",
    SSE_MAX_STREAMS_PER_USER: String(LIMIT),
    INGRESS_EVENTS_PER_SECOND_PER_USER: "0",
  });
  redis = connectRedis();
});

afterAll(async () => {
  for (const o of opened) o.close();
  redis?.disconnect();
  await td?.close();
});

interface Received {
  id: string;
  data: Json;
}

/** An EventSource on `path` (Bearer `key` unless undefined), collecting messages. */
function listen(path: string, key?: string): { es: EventSource; got: Received[]; errors: number[]; close(): void } {
  const got: Received[] = [];
  const errors: number[] = [];
  const es = new EventSource(`${td.url}${path}`, {
    fetch: (input, init) =>
      fetch(input, { ...init, headers: { ...(init?.headers ?? {}), ...(key ? { authorization: `Bearer ${key}` } : {}) } }),
  });
  es.onmessage = (e) => got.push({ id: e.lastEventId, data: JSON.parse(e.data) });
  es.onerror = (e) => errors.push((e as { code?: number }).code ?? 0);
  const handle = { es, got, errors, close: () => es.close() };
  opened.push(handle);
  return handle;
}

/** Raw HTTP: the response head and a reader of the body's text. */
async function rawStream(path: string, headers: Record<string, string>) {
  const ac = new AbortController();
  const res = await fetch(`${td.url}${path}`, { headers, signal: ac.signal });
  let text = "";
  let ended = false;
  const reading = (async () => {
    const reader = res.body?.getReader();
    if (!reader) return;
    const dec = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
      }
    } catch {
      // aborted
    }
    ended = true;
  })();
  const handle = {
    res,
    text: () => text,
    ended: () => ended,
    close: () => ac.abort(),
    reading,
  };
  opened.push(handle);
  return handle;
}

async function httpSource(api: Client): Promise<Json> {
  return createSource(api, { component_code: NAMED_ONLY });
}

async function summaries(api: Client, path: string): Promise<Json[]> {
  const res = await api.get(path, { query: { expand: "event", limit: 100 } });
  expectStatus(res, 200);
  return res.body.data;
}

describe("live tail wire format", () => {
  it("sends id and one data line with the expanded summary item, no event field, and heartbeats", async () => {
    const u = await td.createUser();
    const wf = workflowId();
    await emit(u.api, wf, { first: true });
    const s = await rawStream(`/v1/workflows/${wf}/sse`, { authorization: `Bearer ${u.api_key}` });
    expect(s.res.status).toBe(200);
    expect(s.res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    await waitFor(() => s.text().includes(":sse-handshake"), { what: "the first heartbeat" });
    const id = await emit(u.api, wf, { hello: "wörld" }, { summary: "s1" });
    await waitFor(() => s.text().includes(`id: ${id}\n`), { what: "the event on the stream" });
    // The old event is not replayed without Last-Event-ID.
    expect(s.text()).not.toContain("first");
    const frame = s
      .text()
      .slice(s.text().indexOf(`id: ${id}\n`))
      .split("\n\n")[0] as string;
    const lines = frame.split("\n");
    expect(lines).toHaveLength(2);
    expect(lines[1]?.startsWith("data: ")).toBe(true);
    expect(s.text()).not.toMatch(/^event:/m);
    const item = (await summaries(u.api, `/v1/workflows/${wf}/event_summaries`)).find((e) => e.id === id);
    expect(JSON.parse((lines[1] as string).slice(6))).toEqual(item);
    // Heartbeats keep coming (SSE_HEARTBEAT_SECONDS=1).
    await waitFor(() => s.text().split(":sse-handshake").length >= 3, { what: "two more heartbeats" });
    s.close();
  });
});

describe("live tail with the eventsource client", () => {
  it("streams a workflow's emits in order to a Bearer client, and $errors with event_name", async () => {
    const u = await td.createUser();
    const wf = workflowId();
    await emit(u.api, wf, { warm: 1 });
    const main = listen(`/v1/workflows/${wf}/sse`, u.api_key);
    const errs = listen(`/v1/workflows/${wf}/sse?event_name=%24errors`, u.api_key);
    await waitFor(() => main.es.readyState === EventSource.OPEN && errs.es.readyState === EventSource.OPEN, { what: "streams open" });
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(await emit(u.api, wf, { n: i }));
    const errRes = await u.api.post(`/v1/workflows/${wf}/$errors/events`, { json: { original_event: { n: 1 }, error: { msg: "boom" } } });
    expectStatus(errRes, 202);
    await waitFor(() => main.got.length >= 20 && errs.got.length >= 1, { what: "20 events and one error" });
    expect(main.got.map((g) => g.id)).toEqual(ids);
    expect(main.got.map((g) => g.data.event.raw_event.n)).toEqual(ids.map((_, i) => i));
    expect(errs.got).toHaveLength(1);
    expect(errs.got[0]?.data.event.error.msg).toBe("boom");
    main.close();
    errs.close();
  });

  it("serves a source on every URL form, with a browser token for that source only", async () => {
    const u = await td.createUser();
    const src = await httpSource(u.api);
    const other = await httpSource(u.api);
    const tok = await u.api.post(`/v1/sources/${src.id}/sse_tokens`);
    expectStatus(tok, 200);
    expect(tok.body.data.token).toMatch(/^sse_/);
    expect(tok.body.data.expires_at).toBeGreaterThan(Date.now() / 1000 + 3000);
    const token = tok.body.data.token as string;

    const forms = [
      listen(`/v1/sources/${src.id}/sse`, u.api_key),
      listen(`/sources/${src.id}/sse?token=${token}`),
      listen(`/sse/dc/${src.id}/emits?token=${token}`),
    ];
    const logs = listen(`/sse/dc/${src.id}/observations`, u.api_key);
    await waitFor(() => [...forms, logs].every((f) => f.es.readyState === EventSource.OPEN), { what: "all forms open" });
    const ids = await seedSourceEvents(td, redis, u.id, src.id, [{ a: 1 }, { a: 2 }]);
    const logIds = await seedSourceEvents(td, redis, u.id, src.id, [{ log: "line" }], "$logs");
    await waitFor(() => forms.every((f) => f.got.length >= 2) && logs.got.length >= 1, { what: "events on every form" });
    for (const f of forms) expect(f.got.map((g) => g.id)).toEqual(ids);
    expect(logs.got.map((g) => g.id)).toEqual(logIds);

    // The token opens that source's streams only; without any credential, 401.
    const elsewhere = await client(td.url).get(`/v1/sources/${other.id}/sse`, { query: { token } });
    expect(elsewhere.status).toBe(401);
    expect((await client(td.url).get(`/v1/sources/${src.id}/sse`)).status).toBe(401);
    expect((await client(td.url).get(`/v1/sources/${src.id}/sse`, { query: { token: "sse_nope" } })).status).toBe(401);
    for (const f of [...forms, logs]) f.close();
  });

  it("answers 404 before the stream for an unknown or foreign id, and 400 for a bad Last-Event-ID", async () => {
    const u = await td.createUser();
    const stranger = await td.createUser();
    const src = await httpSource(u.api);
    const foreign = await stranger.api.get(`/v1/sources/${src.id}/sse`);
    expect(foreign.status).toBe(404);
    expect(foreign.body.error).toBeTruthy();
    expect((await u.api.get("/v1/sources/dc_absent000000000/sse")).status).toBe(404);
    expect((await u.api.get(`/v1/workflows/${workflowId()}/sse`)).status).toBe(404);
    const bad = await u.api.request("GET", `/v1/sources/${src.id}/sse`, { headers: { "last-event-id": "yesterday" } });
    expect(bad.status).toBe(400);
    expect(await stranger.api.post(`/v1/sources/${src.id}/sse_tokens`).then((r) => r.status)).toBe(404);
    // HEAD answers the head a GET would, and ends (a HEAD response has no body to stream into).
    const head = await u.api.request("HEAD", `/v1/sources/${src.id}/sse`);
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect((await stranger.api.request("HEAD", `/v1/sources/${src.id}/sse`)).status).toBe(404);
  });

  it("resumes after Last-Event-ID with no gap and no duplicate while events keep coming", async () => {
    const u = await td.createUser();
    const wf = workflowId();
    const before: string[] = [];
    for (let i = 0; i < 10; i++) before.push(await emit(u.api, wf, { n: i }));
    // Emits keep coming while the stream opens, replays and goes live.
    let stop = false;
    const during: string[] = [];
    const emitting = (async () => {
      for (let i = 10; i < 200 && !stop; i++) during.push(await emit(u.api, wf, { n: i }));
    })();
    const s = await rawStream(`/v1/workflows/${wf}/sse`, { authorization: `Bearer ${u.api_key}`, "last-event-id": before[4] as string });
    await new Promise((r) => setTimeout(r, 300));
    stop = true;
    await emitting;
    const after = [await emit(u.api, wf, { n: "last" })];
    const expected = [...before.slice(5), ...during, ...after];
    const idsOf = () => [...s.text().matchAll(/^id: (.+)$/gm)].map((m) => m[1]);
    await waitFor(() => idsOf().includes(after[0] as string), { what: "the last event" });
    expect(idsOf()).toEqual(expected);
    s.close();
  });

  it("reconnects by itself after the stream ends and resumes from the last id it saw", async () => {
    const u = await td.createUser();
    const wf = workflowId();
    await emit(u.api, wf, { warm: true });
    const l = listen(`/v1/workflows/${wf}/sse`, u.api_key);
    await waitFor(() => l.es.readyState === EventSource.OPEN, { what: "open" });
    const first = await emit(u.api, wf, { n: 1 });
    await waitFor(() => l.got.length === 1, { what: "the first event" });
    // Cut every connection of the daemon's HTTP server: the client reconnects with Last-Event-ID.
    td.daemon.server?.closeAllConnections();
    // The emit may meet a pooled keep-alive connection that was just cut: try again on a fresh one.
    const missed = await waitFor(() => emit(u.api, wf, { n: 2 }).catch(() => undefined), { what: "an emit after the cut" });
    await waitFor(() => l.got.length >= 2, { what: "the event emitted while disconnected", timeoutMs: 20_000 });
    const next = await emit(u.api, wf, { n: 3 });
    await waitFor(() => l.got.length >= 3, { what: "a live event after the resume" });
    expect(l.got.map((g) => g.id)).toEqual([first, missed, next]);
    l.close();
  });
});

describe("live tail across processes, limits and ends", () => {
  it("delivers an event recorded through another daemon to this one's streams", async () => {
    const other = await startTestDaemon({ REDIS_KEY_PREFIX: td.prefix, ADMIN_TOKEN: td.adminToken });
    try {
      const u = await td.createUser();
      const wf = workflowId();
      await emit(u.api, wf, { warm: true });
      const l = listen(`/v1/workflows/${wf}/sse`, u.api_key);
      await waitFor(() => l.es.readyState === EventSource.OPEN, { what: "open" });
      const id = await emit(client(other.url, u.api_key), wf, { via: "other" });
      await waitFor(() => l.got.length === 1, { what: "the other daemon's event" });
      expect(l.got[0]?.id).toBe(id);
      l.close();
    } finally {
      await other.daemon.close();
    }
  });

  it("refuses a stream past SSE_MAX_STREAMS_PER_USER with 429, and frees the slot when one closes", async () => {
    const u = await td.createUser();
    const wf = workflowId();
    await emit(u.api, wf, { warm: true });
    const streams = [];
    for (let i = 0; i < LIMIT; i++) {
      const s = await rawStream(`/v1/workflows/${wf}/sse`, { authorization: `Bearer ${u.api_key}` });
      expect(s.res.status).toBe(200);
      streams.push(s);
    }
    const refused = await u.api.get(`/v1/workflows/${wf}/sse`);
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe("limit_exceeded");
    // Another user is not affected.
    const v = await td.createUser();
    await emit(v.api, wf, { warm: true });
    const theirs = await rawStream(`/v1/workflows/${wf}/sse`, { authorization: `Bearer ${v.api_key}` });
    expect(theirs.res.status).toBe(200);
    theirs.close();
    streams[0]?.close();
    await waitFor(
      async () => {
        const s = await rawStream(`/v1/workflows/${wf}/sse`, { authorization: `Bearer ${u.api_key}` });
        if (s.res.status === 200) return true;
        s.close();
        return false;
      },
      { what: "a freed slot" },
    );
    for (const s of streams) s.close();
  });

  it("ends a source's streams when the source is deleted", async () => {
    const u = await td.createUser();
    const src = await httpSource(u.api);
    const s = await rawStream(`/v1/sources/${src.id}/sse`, { authorization: `Bearer ${u.api_key}` });
    await waitFor(() => s.text().includes(":sse-handshake"), { what: "open" });
    expect((await u.api.del(`/v1/sources/${src.id}`)).status).toBeLessThan(300);
    await waitFor(() => s.ended(), { what: "the stream to end", timeoutMs: 10_000 });
  });

  it("cuts off a reader that stops reading once it is 1,000 events behind, keeping memory bounded", { timeout: 120_000 }, async () => {
    const u = await td.createUser();
    const wf = workflowId();
    await emit(u.api, wf, { warm: true });
    const metric = async () => {
      const text = (await client(td.url).get("/metrics")).text;
      return Number(/^tributary_sse_streams_ended_total\{reason="slow_reader"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    const before = await metric();
    // A client that sends the request and never reads a byte of the answer.
    const sock = net.connect(Number(new URL(td.url).port), "127.0.0.1");
    await new Promise<void>((r) => sock.once("connect", () => r()));
    sock.pause();
    sock.write(`GET /v1/workflows/${wf}/sse HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${u.api_key}\r\n\r\n`);
    opened.push({ close: () => sock.destroy() });
    // Events of about 1 KB, so that the count (not the byte budget) is what cuts: once the kernel's
    // buffers are full, 1,000 queued events of this size are far below SSE_MAX_BUFFERED_BYTES_PER_STREAM.
    // Batches of 100 at most, as the stream keeps the latest 100 (the tail reads what is kept).
    const small = "x".repeat(1000);
    let sent = 0;
    await waitFor(
      async () => {
        if ((await metric()) > before) return true;
        if (sent >= 30_000) return false;
        const res = await u.api.post(`/v1/workflows/${wf}/events`, {
          json: { events: Array.from({ length: 50 }, (_, i) => ({ event: { i, small } })) },
        });
        expectStatus(res, 202);
        sent += 50;
        return false;
      },
      { what: "the slow reader to be cut off", timeoutMs: 60_000 },
    );
    sock.destroy();
  });
});

describe("live tail after an API key rotation", () => {
  it("refuses a browser token made with the rotated key with a clear 401, ends the open streams, and honours a token made after", async () => {
    const u = await td.createUser();
    const src = await httpSource(u.api);
    const admin = client(td.url, td.adminToken);
    const made = await u.api.post(`/v1/sources/${src.id}/sse_tokens`);
    expectStatus(made, 200);
    const oldToken = made.body.data.token as string;
    // Works before the rotation.
    const before = await rawStream(`/v1/sources/${src.id}/sse?token=${oldToken}`, {});
    expect(before.res.status).toBe(200);
    const byKey = await rawStream(`/v1/sources/${src.id}/sse`, { authorization: `Bearer ${u.api_key}` });
    expect(byKey.res.status).toBe(200);
    await waitFor(() => before.text().includes(":sse-handshake") && byKey.text().includes(":sse-handshake"), { what: "both streams open" });

    const rotated = await admin.post(`/admin/users/${u.id}/api_key`);
    expectStatus(rotated, 200);
    const newKey = rotated.body.data.api_key as string;

    // Read as a stream: a token still honoured would answer 200 and never end.
    const refused = await rawStream(`/v1/sources/${src.id}/sse?token=${oldToken}`, {});
    expect(refused.res.status).toBe(401);
    await waitFor(() => refused.ended(), { what: "the 401 body" });
    const body = JSON.parse(refused.text());
    expect(body.code).toBe("unauthorized");
    expect(body.error).toMatch(/rotated/);
    expect(body.error).toMatch(/sse_tokens/);
    // Every URL form refuses it.
    const other = await rawStream(`/sse/dc/${src.id}/emits?token=${oldToken}`, {});
    expect(other.res.status).toBe(401);
    // The streams opened with the old key (directly or through its token) end.
    await waitFor(() => before.ended() && byKey.ended(), { what: "the old key's streams to end", timeoutMs: 10_000 });

    const fresh = await client(td.url, newKey).post(`/v1/sources/${src.id}/sse_tokens`);
    expectStatus(fresh, 200);
    const after = listen(`/sources/${src.id}/sse?token=${fresh.body.data.token}`);
    await waitFor(() => after.es.readyState === EventSource.OPEN, { what: "the new token's stream open" });
    const ids = await seedSourceEvents(td, redis, u.id, src.id, [{ after: 1 }]);
    await waitFor(() => after.got.length >= 1, { what: "an event on the new token's stream" });
    expect(after.got.map((g) => g.id)).toEqual(ids);
    after.close();
  });
});
