import { waitFor } from "../../helpers/wait.js";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QUEUES } from "../../../src/queue/catalog.js";
import { createKeys } from "../../../src/store/keys.js";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import {
  b64url,
  createSource,
  createWebhook,
  emit,
  expectError,
  expectStatus,
  HTTP_ESM,
  type Json,
  seedSourceEvents,
  subscribe,
  workflowId,
} from "./support.js";

/** The workflow ingress (SPEC §3), event summaries, event deletion and the workflow registry. */

let td: TestDaemon;
let redis: Redis;
/** The daemon's maintenance queue, read to know when asynchronous deletions have all run. */
let maintenance: Queue;

beforeAll(async () => {
  td = await startTestDaemon();
  redis = connectRedis();
  maintenance = new Queue(QUEUES.maintenance, { connection: redis.duplicate(), prefix: createKeys(td.prefix).bullPrefix });
});

afterAll(async () => {
  await maintenance?.close();
  redis?.disconnect();
  await td?.close();
});

/** Waits until no maintenance job is queued, delayed or running. */
async function maintenanceIdle(): Promise<void> {
  await waitFor(
    async () => {
      const c = await maintenance.getJobCounts("waiting", "active", "delayed", "prioritized", "waiting-children");
      return Object.values(c).every((n) => n === 0);
    },
    { what: "the maintenance queue to drain" },
  );
}

const EVENT_ID = /^\d{13}-\d+$/;

/** Event ids compare by time, then sequence. */
function compareEventIds(a: string, b: string): number {
  const [am, as] = a.split("-").map(BigInt) as [bigint, bigint];
  const [bm, bs] = b.split("-").map(BigInt) as [bigint, bigint];
  return am === bm ? Number(as - bs) : am < bm ? -1 : 1;
}

async function summaries(api: Client, p: string, query: Record<string, unknown> = {}): Promise<Json> {
  const res = await api.get(`/v1/workflows/${p}/event_summaries`, { query });
  expectStatus(res, 200);
  return res.body;
}

describe("POST /workflows/{id}/events", () => {
  it("accepts one emit with 202 and reads it back as {raw_event}", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const res = await u.api.post(`/v1/workflows/${p}/events`, { json: { event: { name: "Luke", title: "Jedi" } } });
    expectStatus(res, 202);
    expect(Object.keys(res.body.data)).toEqual(["id"]);
    const id: string = res.body.data.id;
    expect(id).toMatch(EVENT_ID);
    const page = await summaries(u.api, p);
    expect(page.page_info).toEqual({ total_count: 1, count: 1, start_cursor: id, end_cursor: id });
    expect(page.data).toEqual([
      {
        id,
        indexed_at_ms: Number(id.split("-")[0]),
        event: { raw_event: { name: "Luke", title: "Jedi" } },
        metadata: { emitter_id: p, emit_id: expect.stringMatching(/^emit_[A-Za-z0-9]{10,}$/), name: "" },
      },
    ]);
    expect(Math.abs(page.data[0].indexed_at_ms - Date.now())).toBeLessThan(60_000);
  });

  it("answers alike whether the hot route or the router serves the spelling, under one metrics label", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const label = 'tributary_http_request_duration_seconds_count{route="/v1/workflows/:id/events",method="POST",status="2xx"}';
    const counted = async () => {
      const line = (await u.api.get("/metrics")).text.split("\n").find((l) => l.startsWith(label));
      return line ? Number(line.slice(label.length)) : 0;
    };
    const before = await counted();
    // The exact spelling takes the hot route; the others only the router matches.
    const paths = [
      `/v1/workflows/${p}/events`,
      `/v1/workflows/${p}/events/`,
      `/v1/workflows/${encodeURIComponent(p).replace("p", "%70")}/events`,
    ];
    const ids: string[] = [];
    for (const path of paths) {
      const res = await u.api.post(path, { json: { event: { path } } });
      expectStatus(res, 202);
      ids.push(res.body.data.id);
    }
    expect((await summaries(u.api, p)).data.map((e: Json) => e.id)).toEqual([...ids].reverse());
    expect((await counted()) - before).toBe(paths.length);
    // Paths are case-sensitive: another spelling is no route at all.
    expectError(await u.api.post(`/V1/Workflows/${p}/EVENTS`, { json: { event: 1 } }), 404);
    // The hot route sits behind the same key check, body checks and error mapping.
    const anon = await fetch(`${td.url}/v1/workflows/${p}/events`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(anon.status).toBe(401);
    expectError(await u.api.post(`/v1/workflows/${p}/events`, { body: "a=1", headers: { "content-type": "text/plain" } }), 415);
    expectError(await u.api.post(`/v1/workflows/${p}/events`, { body: "{", headers: { "content-type": "application/json" } }), 400);
    expectError(await u.api.post("/v1/workflows/not-a-workflow/events", { json: { event: 1 } }), 400);
  });

  it.each([
    ["null", null],
    ["a string", "hello"],
    ["a number", 42],
    ["false", false],
    ["an array", [1, "two", { three: 3 }]],
    ["a deep object", { a: { b: { c: { d: [{ e: null }] } } } }],
  ])("accepts %s as the event", async (_label, event) => {
    const u = await td.createUser();
    const p = workflowId();
    await emit(u.api, p, event);
    expect((await summaries(u.api, p, { expand: "event" })).data[0].event).toEqual({ raw_event: event });
  });

  it("keeps the emit's id, summary and ts in the metadata", async () => {
    const u = await td.createUser();
    const p = workflowId();
    await emit(u.api, p, { a: 1 }, { id: "abc", summary: "first", ts: 1_700_000_000_000 });
    await emit(u.api, p, { b: 2 }, { id: 7 });
    const page = await summaries(u.api, p);
    expect(page.data[0].metadata).toEqual({ emitter_id: p, emit_id: expect.any(String), name: "", id: 7 });
    expect(page.data[1].metadata).toEqual({
      emitter_id: p,
      emit_id: expect.any(String),
      name: "",
      id: "abc",
      summary: "first",
      ts: 1_700_000_000_000,
    });
    expect(page.data[0].metadata.emit_id).not.toBe(page.data[1].metadata.emit_id);
  });

  it('records named channels apart from the default one; "default" is the default channel', async () => {
    const u = await td.createUser();
    const p = workflowId();
    const custom = await emit(u.api, p, { b: 2 }, { name: "custom" });
    const viaDefault = await emit(u.api, p, { c: 3 }, { name: "default" });
    const plain = await emit(u.api, p, { d: 4 });
    const def = await summaries(u.api, p);
    expect(def.data.map((e: Json) => e.id)).toEqual([plain, viaDefault]);
    expect(def.data.every((e: Json) => e.metadata.name === "")).toBe(true);
    expect((await summaries(u.api, p, { event_name: "default" })).data.map((e: Json) => e.id)).toEqual([plain, viaDefault]);
    const named = await summaries(u.api, p, { event_name: "custom", expand: "event" });
    expect(named.data).toEqual([
      expect.objectContaining({ id: custom, event: { raw_event: { b: 2 } }, metadata: expect.objectContaining({ name: "custom" }) }),
    ]);
    expect((await summaries(u.api, p, { event_name: "nothing-here" })).data).toEqual([]);
  });

  it("accepts a batch with 202 and returns the ids in input order", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const events = Array.from({ length: 30 }, (_, i) => ({ event: { i }, summary: `s${i}` }));
    const res = await u.api.post(`/v1/workflows/${p}/events`, { json: { events } });
    expectStatus(res, 202);
    const ids: string[] = res.body.data.map((d: Json) => d.id);
    expect(res.body.data.every((d: Json) => Object.keys(d).join() === "id")).toBe(true);
    expect(new Set(ids).size).toBe(30);
    expect([...ids].sort(compareEventIds)).toEqual(ids);
    const page = await summaries(u.api, p, { limit: 100 });
    expect(page.data.map((e: Json) => [e.id, e.event.raw_event.i, e.metadata.summary])).toEqual(
      ids.map((id, i) => [id, i, `s${i}`]).reverse(),
    );
  });

  it("splits a batch across channels and keeps each event on its own", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const events = [{ event: 0 }, { event: 1, name: "a" }, { event: 2, name: "a" }, { event: 3 }, { event: 4, name: "b" }];
    const res = await u.api.post(`/v1/workflows/${p}/events`, { json: { events } });
    expectStatus(res, 202);
    const ids: string[] = res.body.data.map((d: Json) => d.id);
    expect(ids).toHaveLength(5);
    const raw = async (event_name?: string) =>
      (await summaries(u.api, p, { event_name, expand: "event" })).data.map((e: Json) => [e.id, e.event.raw_event]);
    expect(await raw()).toEqual([
      [ids[3], 3],
      [ids[0], 0],
    ]);
    expect(await raw("a")).toEqual([
      [ids[2], 2],
      [ids[1], 1],
    ]);
    expect(await raw("b")).toEqual([[ids[4], 4]]);
  });

  it("accepts 1000 events in one batch and keeps the latest 100", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const events = Array.from({ length: 1000 }, (_, i) => ({ event: { i } }));
    const res = await u.api.post(`/v1/workflows/${p}/events`, { json: { events } });
    expectStatus(res, 202);
    expect(res.body.data).toHaveLength(1000);
    const page = await summaries(u.api, p, { limit: 100 });
    expect(page.page_info.total_count).toBe(100);
    expect(page.data.map((e: Json) => e.event.raw_event.i)).toEqual(Array.from({ length: 100 }, (_, k) => 999 - k));
    // Trimming is exact, and keeps working for later emits.
    await emit(u.api, p, { i: 1000 });
    const after = await summaries(u.api, p, { limit: 100 });
    expect(after.page_info.total_count).toBe(100);
    expect(after.data.at(-1).event.raw_event.i).toBe(901);
  });

  it("answers 400 to 1001 events, and stores nothing", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const events = Array.from({ length: 1001 }, () => ({ event: 1 }));
    expectError(await u.api.post(`/v1/workflows/${p}/events`, { json: { events } }), 400, /1000/);
    expectError(await u.api.get(`/v1/workflows/${p}/event_summaries`), 404);
  });

  it.each([
    ["an empty body object", {}, /event/],
    ["events that is not an array", { events: "nope" }, /events/],
    ["an empty events array", { events: [] }, /events/],
    ["a batch item without event", { events: [{ event: 1 }, { name: "x" }] }, /events\[1\]\.event/],
    ["a batch item that is not an object", { events: [{ event: 1 }, 5] }, /events\[1\]/],
    ["a numeric name", { event: 1, name: 5 }, /name/],
    ["a name of 201 characters", { event: 1, name: "n".repeat(201) }, /name/],
    ["a name with a newline", { event: 1, name: "a\nb" }, /name/],
    ["an object id", { event: 1, id: { a: 1 } }, /id/],
    ["an id of 1001 characters", { event: 1, id: "i".repeat(1001) }, /id/],
    ["a numeric summary", { event: 1, summary: 3 }, /summary/],
    ["a string ts", { event: 1, ts: "2024-01-01" }, /ts/],
    [
      "a bad item deep in a batch",
      { events: [...Array.from({ length: 50 }, (_, i) => ({ event: i })), { event: 1, ts: "x" }] },
      /events\[50\]\.ts/,
    ],
  ])("answers 400 naming the problem for %s, and stores nothing", async (_label, body, message) => {
    const u = await td.createUser();
    const p = workflowId();
    expectError(await u.api.post(`/v1/workflows/${p}/events`, { json: body }), 400, message);
    // Not even the workflow was registered.
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
  });

  it("answers 400 to a JSON body that is not an object, malformed JSON and no body; 415 to text", async () => {
    const u = await td.createUser();
    const p = workflowId();
    for (const body of ['"just a string"', "[1,2]", "null", "42"]) {
      expectError(await u.api.post(`/v1/workflows/${p}/events`, { body, headers: { "content-type": "application/json" } }), 400);
    }
    expectError(
      await u.api.post(`/v1/workflows/${p}/events`, { body: '{"event": ', headers: { "content-type": "application/json" } }),
      400,
    );
    expectError(await u.api.post(`/v1/workflows/${p}/events`), 400);
    expectError(await u.api.post(`/v1/workflows/${p}/events`, { body: "event=1", headers: { "content-type": "text/plain" } }), 415);
    expectError(await u.api.get(`/v1/workflows/${p}/event_summaries`), 404);
  });

  it.each([["not-a-workflow"], ["p_"], ["p_a.b"], ["p_%20"], [`p_${"x".repeat(65)}`], ["dc_abcdefghijkl"]])(
    "answers 400 naming the workflow id for %s",
    async (id) => {
      const u = await td.createUser();
      expectError(await u.api.post(`/v1/workflows/${id}/events`, { json: { event: 1 } }), 400, /workflow_id/);
    },
  );

  it("keeps workflows of different users apart, even under the same id", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const p = workflowId();
    await emit(a.api, p, { secret: "a" });
    expectError(await b.api.get(`/v1/workflows/${p}/event_summaries`), 404);
    expectError(await b.api.get(`/v1/workflows/${p}/$errors/event_summaries`), 404);
    await emit(b.api, p, { mine: "b" });
    expect((await summaries(b.api, p, { expand: "event" })).data.map((e: Json) => e.event.raw_event)).toEqual([{ mine: "b" }]);
    expect((await summaries(a.api, p, { expand: "event" })).data.map((e: Json) => e.event.raw_event)).toEqual([{ secret: "a" }]);
  });
});

describe("event summaries", () => {
  async function workflowWith(n: number) {
    const u = await td.createUser();
    const p = workflowId();
    const res = await u.api.post(`/v1/workflows/${p}/events`, {
      json: { events: Array.from({ length: n }, (_, i) => ({ event: { i } })) },
    });
    expectStatus(res, 202);
    const ids: string[] = res.body.data.map((d: Json) => d.id);
    return { u, p, newestFirst: [...ids].reverse() };
  }

  it("pages forward with after=end_cursor through every event exactly once", async () => {
    const { u, p, newestFirst } = await workflowWith(25);
    const seen: string[] = [];
    let after: string | undefined;
    for (let guard = 0; guard < 5; guard++) {
      const page = await summaries(u.api, p, { limit: 10, after });
      expect(page.page_info.total_count).toBe(25);
      if (page.data.length === 0) {
        expect(page.page_info).toEqual({ total_count: 25, count: 0, start_cursor: null, end_cursor: null });
        break;
      }
      expect(page.page_info.start_cursor).toBe(page.data[0].id);
      expect(page.page_info.end_cursor).toBe(page.data.at(-1).id);
      seen.push(...page.data.map((e: Json) => e.id));
      after = page.page_info.end_cursor;
    }
    expect(seen).toEqual(newestFirst);
  });

  it("pages backward with before: the items closest to the cursor, newest first", async () => {
    const { u, p, newestFirst } = await workflowWith(10);
    const page = await summaries(u.api, p, { limit: 3, before: newestFirst[6] });
    expect(page.data.map((e: Json) => e.id)).toEqual(newestFirst.slice(3, 6));
    const top = await summaries(u.api, p, { limit: 3, before: newestFirst[1] });
    expect(top.data.map((e: Json) => e.id)).toEqual([newestFirst[0]]);
    expect((await summaries(u.api, p, { before: newestFirst[0] })).data).toEqual([]);
  });

  it("defaults to 10 and answers 400 to a limit outside 1..100", async () => {
    const { u, p } = await workflowWith(12);
    expect((await summaries(u.api, p)).data).toHaveLength(10);
    expect((await summaries(u.api, p, { limit: 1 })).data).toHaveLength(1);
    for (const limit of ["0", "101", "x", "2.5"]) {
      expectError(await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { limit } }), 400, /limit/);
    }
  });

  it.each([
    ["a word", "abc"],
    ["a bare number", "1234"],
    ["a resource cursor", b64url("dc_abcdefghijkl")],
    ["a negative id", "-1-0"],
    ["an id with a space", "1 -0"],
  ])("answers 400 invalid_cursor to %s as a cursor", async (_label, cursor) => {
    const { u, p } = await workflowWith(2);
    for (const name of ["after", "before"]) {
      const res = await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { [name]: cursor } });
      expectError(res, 400, new RegExp(name));
      expect(res.body.code).toBe("invalid_cursor");
    }
  });

  it("answers 400 to after together with before", async () => {
    const { u, p, newestFirst } = await workflowWith(3);
    expectError(await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { after: newestFirst[0], before: newestFirst[2] } }), 400);
  });

  it("truncates an event over 1024 bytes of JSON to its first bytes, unless expanded", async () => {
    const u = await td.createUser();
    const p = workflowId();
    // {"raw_event":{"t":"…"}} is 22 bytes around the text.
    const atLimit = { t: "a".repeat(1024 - 22) };
    const overLimit = { t: "b".repeat(1024 - 21) };
    await emit(u.api, p, atLimit);
    await emit(u.api, p, overLimit);
    const [over, at] = (await summaries(u.api, p)).data;
    expect(at.event).toEqual({ raw_event: atLimit });
    expect(at.truncated).toBeUndefined();
    const full = JSON.stringify({ raw_event: overLimit });
    expect(Buffer.byteLength(full)).toBe(1025);
    expect(over.truncated).toBe(true);
    expect(over.event).toBe(full.slice(0, 1024));
    const expanded = (await summaries(u.api, p, { expand: "event" })).data;
    expect(expanded[0].event).toEqual({ raw_event: overLimit });
    expect(expanded[0].truncated).toBeUndefined();
    expect((await summaries(u.api, p, { expand: "metadata, event" })).data[0].event).toEqual({ raw_event: overLimit });
    expect((await summaries(u.api, p, { expand: "events" })).data[0].truncated).toBe(true);
  });

  it.each([
    ["two-byte", "é"],
    ["three-byte", "€"],
    ["four-byte", "😀"],
  ])("truncates on a character boundary with %s characters", async (_label, char) => {
    const u = await td.createUser();
    const p = workflowId();
    // Shift the text by 0..3 bytes so that byte 1024 falls inside a character at least once.
    for (let shift = 0; shift < 4; shift++) await emit(u.api, p, { t: "x".repeat(shift) + char.repeat(600) });
    const data = (await summaries(u.api, p)).data;
    expect(data).toHaveLength(4);
    for (const [i, s] of data.entries()) {
      const shift = 3 - i;
      const full = JSON.stringify({ raw_event: { t: "x".repeat(shift) + char.repeat(600) } });
      expect(s.truncated).toBe(true);
      expect(typeof s.event).toBe("string");
      expect(s.event).not.toContain("\uFFFD");
      const bytes = Buffer.byteLength(s.event);
      expect(bytes).toBeLessThanOrEqual(1024);
      expect(bytes).toBeGreaterThan(1024 - Buffer.byteLength(char));
      expect(full.startsWith(s.event)).toBe(true);
    }
  });

  it("truncates source events too, which are not wrapped in raw_event", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const big = { text: "z".repeat(2000) };
    await seedSourceEvents(td, redis, u.id, s.id, [big, { small: true }]);
    const page = (await u.api.get(`/v1/sources/${s.id}/event_summaries`)).body;
    expect(page.data[0]).toMatchObject({ event: { small: true }, metadata: { emitter_id: s.id, name: "" } });
    expect(page.data[0].truncated).toBeUndefined();
    expect(page.data[1].truncated).toBe(true);
    expect(page.data[1].event).toBe(JSON.stringify(big).slice(0, 1024));
    const expanded = (await u.api.get(`/v1/sources/${s.id}/event_summaries`, { query: { expand: "event" } })).body;
    expect(expanded.data[1].event).toEqual(big);
  });

  it("applies include and exclude to summaries, never to page_info", async () => {
    const { u, p } = await workflowWith(2);
    const inc = await summaries(u.api, p, { include: "id,metadata" });
    expect(Object.keys(inc.data[0]).sort()).toEqual(["id", "metadata"]);
    expect(inc.page_info.count).toBe(2);
    const exc = await summaries(u.api, p, { exclude: "event,indexed_at_ms" });
    expect(Object.keys(exc.data[0]).sort()).toEqual(["id", "metadata"]);
  });

  it("answers 404 for a workflow never seen, and 400 for a malformed workflow id", async () => {
    const u = await td.createUser();
    expectError(await u.api.get(`/v1/workflows/${workflowId()}/event_summaries`), 404);
    expectError(await u.api.get("/v1/workflows/bogus/event_summaries"), 400, /workflow_id/);
  });
});

describe("workflow errors", () => {
  it("records an error on $errors and fills the missing original_context fields", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const before = Date.now();
    const res = await u.api.post(`/v1/workflows/${p}/$errors/events`, {
      json: { original_event: { name: "Luke" }, error: { code: "InternalFailure", msg: "boom", stack: "at x", cellId: "c_1" } },
    });
    expectStatus(res, 202);
    expect(res.body.data.id).toMatch(EVENT_ID);
    for (const path of [`/v1/workflows/${p}/$errors/event_summaries`, `/v1/workflows/${p}/%24errors/event_summaries`]) {
      const list = await u.api.get(path, { query: { expand: "event" } });
      expectStatus(list, 200);
      expect(list.body.page_info.total_count).toBe(1);
      const [e] = list.body.data;
      expect(e.id).toBe(res.body.data.id);
      expect(e.metadata).toEqual({ emitter_id: p, emit_id: expect.any(String), name: "$errors" });
      // Errors are recorded as given, not wrapped in raw_event.
      expect(e.event.raw_event).toBeUndefined();
      expect(e.event.original_event).toEqual({ name: "Luke" });
      expect(e.event.error).toEqual({ code: "InternalFailure", msg: "boom", stack: "at x", cellId: "c_1", ts: expect.any(String) });
      expect(Date.parse(e.event.error.ts)).toBeGreaterThanOrEqual(before - 1000);
      const ctx = e.event.original_context;
      expect(ctx).toEqual({
        id: expect.any(String),
        ts: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/),
        workflow_id: p,
        deployment_id: expect.stringMatching(/^d_[A-Za-z0-9]{10,}$/),
        source_type: "API",
        verified: false,
        owner_id: u.id,
        platform_version: "0.0.0",
      });
    }
    expect((await summaries(u.api, p)).data).toEqual([]);
  });

  it("keeps the original_context and error fields the caller gave", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const given = { id: "ctx-1", ts: "2024-01-01T00:00:00.000Z", verified: true, deployment_id: "d_given", extra: { k: 1 } };
    const res = await u.api.post(`/v1/workflows/${p}/%24errors/events`, {
      json: { original_event: [1, 2], error: { ts: "2024-02-02T00:00:00.000Z" }, original_context: given },
    });
    expectStatus(res, 202);
    const [e] = (await u.api.get(`/v1/workflows/${p}/$errors/event_summaries`, { query: { expand: "event" } })).body.data;
    expect(e.event.original_context).toMatchObject({ ...given, workflow_id: p, owner_id: u.id, source_type: "API" });
    expect(e.event.error).toEqual({ ts: "2024-02-02T00:00:00.000Z" });
    expect(e.event.original_event).toEqual([1, 2]);
  });

  it("records a missing original_event as null and an absent error as just its time", async () => {
    const u = await td.createUser();
    const p = workflowId();
    expectStatus(await u.api.post(`/v1/workflows/${p}/$errors/events`, { json: {} }), 202);
    const [e] = (await u.api.get(`/v1/workflows/${p}/$errors/event_summaries`, { query: { expand: "event" } })).body.data;
    expect(e.event.original_event).toBeNull();
    expect(Object.keys(e.event.error)).toEqual(["ts"]);
  });

  it.each([
    ["a body that is an array", [1], /body/],
    ["an error that is a string", { error: "boom" }, /error/],
    ["a numeric error.code", { error: { code: 500 } }, /error\.code/],
    ["an object error.stack", { error: { stack: { line: 1 } } }, /error\.stack/],
    ["an original_context that is an array", { original_context: [] }, /original_context/],
  ])("answers 400 for %s and records nothing", async (_label, body, message) => {
    const u = await td.createUser();
    const p = workflowId();
    expectError(await u.api.post(`/v1/workflows/${p}/$errors/events`, { json: body }), 400, message);
    expectError(await u.api.get(`/v1/workflows/${p}/$errors/event_summaries`), 404);
  });
});

describe("DELETE /sources/{id}/events", () => {
  async function sourceWithEvents(n: number) {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const ids = await seedSourceEvents(
      td,
      redis,
      u.id,
      s.id,
      Array.from({ length: n }, (_, i) => ({ i })),
    );
    return { u, s, ids };
  }

  const idsOf = async (api: Client, sourceId: string, event_name?: string) => {
    const res = await api.get(`/v1/sources/${sourceId}/event_summaries`, { query: { limit: 100, event_name } });
    expectStatus(res, 200);
    return (res.body.data as Json[]).map((e) => e.id as string).reverse();
  };

  /** Polls until the source's remaining ids (oldest first) are `expected`. */
  const awaitIds = (api: Client, sourceId: string, expected: string[], event_name?: string) =>
    waitFor(
      async () => {
        const now = await idsOf(api, sourceId, event_name);
        return JSON.stringify(now) === JSON.stringify(expected) ? now : undefined;
      },
      { what: `events ${JSON.stringify(expected)}` },
    );

  it("answers 202 with no body, then deletes every event of the default channel", async () => {
    const { u, s } = await sourceWithEvents(5);
    const logs = await seedSourceEvents(td, redis, u.id, s.id, [{ log: 1 }], "$logs");
    const res = await u.api.del(`/v1/sources/${s.id}/events`);
    expectStatus(res, 202);
    expect(res.text).toBe("");
    await awaitIds(u.api, s.id, []);
    expect(await idsOf(u.api, s.id, "$logs")).toEqual(logs);
  });

  it("deletes from start_id on, inclusive", async () => {
    const { u, s, ids } = await sourceWithEvents(6);
    expectStatus(await u.api.del(`/v1/sources/${s.id}/events`, { query: { start_id: ids[3] } }), 202);
    await awaitIds(u.api, s.id, ids.slice(0, 3));
  });

  it("deletes up to end_id, inclusive", async () => {
    const { u, s, ids } = await sourceWithEvents(6);
    expectStatus(await u.api.del(`/v1/sources/${s.id}/events`, { query: { end_id: ids[2] } }), 202);
    await awaitIds(u.api, s.id, ids.slice(3));
  });

  it("deletes an inclusive range, and a single event when both ids are equal", async () => {
    const { u, s, ids } = await sourceWithEvents(6);
    expectStatus(await u.api.del(`/v1/sources/${s.id}/events`, { query: { start_id: ids[1], end_id: ids[3] } }), 202);
    await awaitIds(u.api, s.id, [ids[0]!, ids[4]!, ids[5]!]);
    expectStatus(await u.api.del(`/v1/sources/${s.id}/events`, { query: { start_id: ids[5], end_id: ids[5] } }), 202);
    await awaitIds(u.api, s.id, [ids[0]!, ids[4]!]);
  });

  it("deletes only the channel named by event_name", async () => {
    const { u, s, ids } = await sourceWithEvents(2);
    await seedSourceEvents(td, redis, u.id, s.id, [{ log: 1 }, { log: 2 }], "$logs");
    expectStatus(await u.api.del(`/v1/sources/${s.id}/events`, { query: { event_name: "$logs" } }), 202);
    await awaitIds(u.api, s.id, [], "$logs");
    expect(await idsOf(u.api, s.id)).toEqual(ids);
  });

  it("deletes nothing for an empty range, and new events are kept afterwards", async () => {
    const { u, s, ids } = await sourceWithEvents(4);
    expectStatus(await u.api.del(`/v1/sources/${s.id}/events`, { query: { start_id: ids[3], end_id: ids[0] } }), 202);
    await maintenanceIdle();
    expect(await idsOf(u.api, s.id)).toEqual(ids);
    const more = await seedSourceEvents(td, redis, u.id, s.id, [{ later: true }]);
    expect(await idsOf(u.api, s.id)).toEqual([...ids, ...more]);
  });

  it.each([
    ["start_id", "abc"],
    ["end_id", "12-x"],
    ["start_id", "-1"],
  ])("answers 400 naming %s for %j", async (name, value) => {
    const { u, s, ids } = await sourceWithEvents(2);
    expectError(await u.api.del(`/v1/sources/${s.id}/events`, { query: { [name]: value } }), 400, new RegExp(name));
    expect(await idsOf(u.api, s.id)).toEqual(ids);
  });

  it("answers 404 for an unknown or foreign source and deletes nothing", async () => {
    const { u, s, ids } = await sourceWithEvents(2);
    const other = await td.createUser();
    expectError(await other.api.del(`/v1/sources/${s.id}/events`), 404);
    expectError(await u.api.del("/v1/sources/dc_doesnotexist000/events"), 404);
    await maintenanceIdle();
    expect(await idsOf(u.api, s.id)).toEqual(ids);
  });
});

describe("workflow registry", () => {
  it("registers a workflow on PUT and updates only the fields given", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const put = await u.api.put(`/v1/workflows/${p}`, { json: { name: "My flow", trigger_url: "https://example.com/trigger" } });
    expectStatus(put, 200);
    expect(put.body.data).toEqual({
      id: p,
      name: "My flow",
      trigger_url: "https://example.com/trigger",
      created_at: expect.any(Number),
      updated_at: expect.any(Number),
    });
    const rename = await u.api.put(`/v1/workflows/${p}`, { json: { name: "Renamed" } });
    expect(rename.body.data).toMatchObject({
      name: "Renamed",
      trigger_url: "https://example.com/trigger",
      created_at: put.body.data.created_at,
    });
    const cleared = await u.api.put(`/v1/workflows/${p}`, { query: { trigger_url: "" } });
    expect(cleared.body.data).toMatchObject({ name: "Renamed", trigger_url: null });
    expect((await u.api.get(`/v1/workflows/${p}`)).body.data).toEqual(cleared.body.data);
  });

  it.each([
    ["a trigger_url without a scheme", { trigger_url: "example.com/x" }, /trigger_url/],
    ["a numeric trigger_url", { trigger_url: 5 }, /trigger_url/],
    ["a numeric name", { name: 5 }, /name/],
    ["a name of 201 characters", { name: "n".repeat(201) }, /name/],
  ])("answers 400 for %s and registers nothing", async (_label, body, message) => {
    const u = await td.createUser();
    const p = workflowId();
    expectError(await u.api.put(`/v1/workflows/${p}`, { json: body }), 400, message);
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
  });

  it("registers a workflow the first time it emits", async () => {
    const u = await td.createUser();
    const p = workflowId();
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
    await emit(u.api, p, 1);
    expect((await u.api.get(`/v1/workflows/${p}`)).body.data).toMatchObject({ id: p, name: null, trigger_url: null });
  });

  it("lists the user's workflows newest first with base64url cursors", async () => {
    const u = await td.createUser();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const p = workflowId();
      expectStatus(await u.api.put(`/v1/workflows/${p}`, { json: { name: `w${i}` } }), 200);
      ids.push(p);
    }
    const res = await u.api.get("/v1/users/me/workflows", { query: { limit: 2 } });
    expectStatus(res, 200);
    expect(res.body.page_info).toEqual({ total_count: 3, count: 2, start_cursor: b64url(ids[2]!), end_cursor: b64url(ids[1]!) });
    expect(res.body.data.map((w: Json) => w.name)).toEqual(["w2", "w1"]);
    const rest = await u.api.get("/v1/users/me/workflows", { query: { after: res.body.page_info.end_cursor } });
    expect(rest.body.data.map((w: Json) => w.id)).toEqual([ids[0]]);
    const other = await td.createUser();
    expect((await other.api.get("/v1/users/me/workflows")).body.page_info.total_count).toBe(0);
  });

  it("deletes with 204, then answers 404; removes the subscriptions that name it", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const hook = await createWebhook(u.api, "https://example.com/wf");
    await subscribe(u.api, p, hook.id);
    await subscribe(u.api, "dc_*", p);
    const keep = await subscribe(u.api, "p_*", hook.id);
    const del = await u.api.del(`/v1/workflows/${p}`);
    expectStatus(del, 204);
    expect(del.text).toBe("");
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
    expectError(await u.api.del(`/v1/workflows/${p}`), 404);
    expectError(await u.api.get(`/v1/workflows/${p}/event_summaries`), 404);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([keep]);
  });

  it("drops a deleted workflow's events, so the same id starts empty when seen again", async () => {
    const u = await td.createUser();
    const p = workflowId();
    await emit(u.api, p, { old: true });
    expectStatus(await u.api.post(`/v1/workflows/${p}/$errors/events`, { json: { error: { msg: "old" } } }), 202);
    expectStatus(await u.api.del(`/v1/workflows/${p}`), 204);
    await emit(u.api, p, { fresh: true });
    const page = await summaries(u.api, p, { expand: "event" });
    expect(page.data.map((e: Json) => e.event.raw_event)).toEqual([{ fresh: true }]);
    expect((await u.api.get(`/v1/workflows/${p}/$errors/event_summaries`)).body.data).toEqual([]);
  });

  it("keeps one user's workflow registry from another", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const p = workflowId();
    expectStatus(await a.api.put(`/v1/workflows/${p}`, { json: { name: "a's" } }), 200);
    expectError(await b.api.get(`/v1/workflows/${p}`), 404);
    expectError(await b.api.del(`/v1/workflows/${p}`), 404);
    expect((await a.api.get(`/v1/workflows/${p}`)).body.data.name).toBe("a's");
  });

  it("answers 400 to a malformed workflow id on every registry route", async () => {
    const u = await td.createUser();
    expectError(await u.api.put("/v1/workflows/p_bad%20id", { json: {} }), 400, /workflow_id/);
    expectError(await u.api.get("/v1/workflows/nope"), 400, /workflow_id/);
    expectError(await u.api.del("/v1/workflows/p_"), 400, /workflow_id/);
  });
});
