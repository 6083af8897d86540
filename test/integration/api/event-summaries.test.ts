import { waitFor } from "../../helpers/wait.js";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QUEUES } from "../../../src/queue/catalog.js";
import { createKeys } from "../../../src/store/keys.js";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import { b64url, createSource, emit, expectError, expectStatus, HTTP_ESM, type Json, seedSourceEvents, workflowId } from "./support.js";

/** Event summaries (pages, cursors, truncation, fields) and event deletion (DELETE /sources/{id}/events). */

let td: TestDaemon;
let redis: Redis;
/** The daemon's maintenance queue, read to know when asynchronous deletions have all run. */
let maintenance: Queue;

beforeAll(async () => {
  td = await startTestDaemon();
  redis = connectRedis();
  maintenance = new Queue(QUEUES.maintenance, { connection: redis.duplicate(), prefix: createKeys(td.prefix).queuePrefix("maintenance") });
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

async function summaries(api: Client, p: string, query: Record<string, unknown> = {}): Promise<Json> {
  const res = await api.get(`/v1/workflows/${p}/event_summaries`, { query });
  expectStatus(res, 200);
  return res.body;
}

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
