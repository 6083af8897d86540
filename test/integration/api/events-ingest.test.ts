import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { emit, expectError, expectStatus, type Json, workflowId } from "./support.js";
import { compareEventIds } from "../../../src/domain/ids.js";

/** The workflow ingress (SPEC §3): emits, batches, channels, workflow errors. */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon();
});

afterAll(async () => {
  await td?.close();
});

const EVENT_ID = /^\d{13}-\d+$/;

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
