import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { type Json, expectStatus, createSource, events } from "./support.js";

/**
 * Dedupe strategies and plan quotas through real source runs (SPEC §5 "$emit", "Quotas"). The
 * daemon allows free users 3 runs a day; the dedupe tests use paid users, who have no such limit.
 */

const QUOTA = 3;

/** Emits one event per id in the request body, then a marker without an id (never deduped). */
const deduper = (strategy: string) => `module.exports = {
  name: "Runtime Dedupe ${strategy}",
  version: "0.0.1",
  dedupe: "${strategy}",
  props: { http: "$.interface.http" },
  async run(event) {
    for (const id of event.body.ids) this.$emit({ id }, { id, summary: "item " + id });
    this.$emit({ marker: event.body.marker });
  },
};
`;

/** Burns a little sandbox time so compute usage is visible, then emits. */
const WORKER = `module.exports = {
  name: "Runtime Worker",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    const end = Date.now() + 30;
    while (Date.now() < end) {}
    this.$emit({ worked: event && event.body !== undefined ? event.body : event });
  },
};
`;

let td: TestDaemon;
const anon = () => client(td.url);

beforeAll(async () => {
  td = await startTestDaemon({ FREE_DAILY_INVOCATIONS_QUOTA: String(QUOTA) });
});

afterAll(async () => {
  await td?.close();
});

async function me(api: Client): Promise<Json> {
  const res = await api.get("/v1/users/me");
  expectStatus(res, 200);
  return res.body.data;
}

/**
 * Sends the ids in one request, waits for that run's marker, and returns the ids the run kept
 * (those recorded after the previous marker).
 */
function dedupeSession(api: Client, source: Json) {
  let marker = 0;
  return async (ids: (string | number)[]): Promise<(string | number)[]> => {
    marker++;
    const m = marker;
    expectStatus(await anon().post(source.configured_props.http.endpoint_url, { json: { ids, marker: m } }), 200);
    const all = await waitFor(
      async () => {
        const e = await events(api, source.id);
        return e.some((x) => x.event.marker === m) ? e : undefined;
      },
      { what: `the run of request ${m}` },
    );
    const start = all.findIndex((x) => x.event.marker === m - 1) + 1;
    const end = all.findIndex((x) => x.event.marker === m);
    return all.slice(start, end).map((x) => x.event.id);
  };
}

describe("dedupe", () => {
  it("unique drops ids seen in the last 100, within a run and across runs", async () => {
    const u = await td.createUser("paid");
    const send = dedupeSession(u.api, await createSource(u.api, deduper("unique")));
    expect(await send([1, 2, 2, 3])).toEqual([1, 2, 3]);
    expect(await send([3, 4, 1, "5"])).toEqual([4, "5"]);
    // The cache holds 1, 2, 3, 4, "5"; 98 fresh ids push the oldest three out, so 1 is new again
    // while 4 and the fresh ids are still cached. (98: a run's events and the previous marker
    // must fit in the 100 events a summary stream keeps.)
    expect(await send(Array.from({ length: 98 }, (_, i) => 100 + i))).toHaveLength(98);
    expect(await send([150, 4, 1])).toEqual([1]);
  });

  it("greatest keeps only ids above the greatest seen, comparing numbers as numbers", async () => {
    const u = await td.createUser("paid");
    const send = dedupeSession(u.api, await createSource(u.api, deduper("greatest")));
    expect(await send([5, 3, 7, 6])).toEqual([5, 7]);
    expect(await send([7, 8, 2, 10])).toEqual([8, 10]);
    expect(await send(["9", "11"])).toEqual(["11"]);
  });

  it("last keeps the events after the last id emitted, or all of them when it is absent", async () => {
    const u = await td.createUser("paid");
    const send = dedupeSession(u.api, await createSource(u.api, deduper("last")));
    expect(await send(["a", "b", "c"])).toEqual(["a", "b", "c"]);
    expect(await send(["b", "c", "d", "e"])).toEqual(["d", "e"]);
    expect(await send(["x", "y"])).toEqual(["x", "y"]);
  });
});

describe("free plan quotas", () => {
  it("counts runs and compute time live, then refuses requests with 429 and skips delivered events with an $errors record", async () => {
    const u = await td.createUser("free");
    const fresh = await me(u.api);
    expect(fresh).toMatchObject({ daily_invocations_quota: QUOTA, daily_invocations_used: 0, daily_compute_time_used: 0 });
    const s = await createSource(u.api, WORKER);
    const url = s.configured_props.http.endpoint_url;

    for (let i = 1; i <= QUOTA; i++) {
      expectStatus(await anon().post(url, { json: { i } }), 200);
      const now = await waitFor(
        async () => {
          const m = await me(u.api);
          return m.daily_invocations_used === i ? m : undefined;
        },
        { what: `daily_invocations_used to reach ${i}` },
      );
      // Each run spins for 30 ms of sandbox time.
      expect(now.daily_compute_time_used).toBeGreaterThanOrEqual(30 * i);
    }
    expect(await events(u.api, s.id)).toHaveLength(QUOTA);

    const refused = await anon().post(url, { json: { i: 4 } });
    expectStatus(refused, 429);
    expect(refused.body.code).toBe("quota_exceeded");
    expect(refused.body.error).toMatch(/invocations/);
    // Retry-After points at the next 00:00 UTC.
    const midnight = new Date();
    midnight.setUTCHours(24, 0, 0, 0);
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(Math.abs(retryAfter - (midnight.getTime() - Date.now()) / 1000)).toBeLessThan(5);

    // A delivered event is skipped and the skip is recorded.
    const workflow = `p_${Math.random().toString(36).slice(2, 10)}`;
    expectStatus(await u.api.post("/v1/subscriptions", { query: { emitter_id: workflow, listener_id: s.id } }), 200);
    expectStatus(await u.api.post(`/v1/workflows/${workflow}/events`, { json: { event: { late: true } } }), 202);
    const [skip] = await waitFor(
      async () => {
        const e = await events(u.api, s.id, "$errors");
        return e.length > 0 ? e : undefined;
      },
      { what: "the $errors record of the skipped run" },
    );
    expect(skip.event.error.code).toBe("QUOTA_EXCEEDED");
    expect(skip.event.error.msg).toMatch(/daily invocations quota \(3\)/);
    expect(skip.event.original_event).toEqual({ late: true });
    expect(skip.event.original_context.emitter_id).toBe(s.id);
    // Skipped runs neither run nor count.
    expect(await events(u.api, s.id)).toHaveLength(QUOTA);
    expect((await me(u.api)).daily_invocations_used).toBe(QUOTA);

    // Quotas are per user: another free user's source still runs.
    const other = await td.createUser("free");
    const os = await createSource(other.api, WORKER);
    expectStatus(await anon().post(os.configured_props.http.endpoint_url, { json: {} }), 200);
    await waitFor(async () => (await events(other.api, os.id)).length === 1, { what: "the other user's run" });
  });

  it("skips timer ticks past the quota with an $errors record", async () => {
    const u = await td.createUser("free");
    const timer = `module.exports = {
      name: "Runtime Quota Timer",
      version: "0.0.1",
      props: { timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } } },
      async run(event) { this.$emit({ at: event.timestamp }); },
    };`;
    const s = await createSource(u.api, timer);
    const errs = await waitFor(
      async () => {
        const e = await events(u.api, s.id, "$errors");
        return e.length > 0 ? e : undefined;
      },
      { timeoutMs: 10_000, what: "a skipped tick" },
    );
    expect(errs[0].event.error.code).toBe("QUOTA_EXCEEDED");
    expect(errs[0].event.original_event).toMatchObject({ interval_seconds: 1 });
    expect(await events(u.api, s.id)).toHaveLength(QUOTA);
    expectStatus(await u.api.del(`/v1/sources/${s.id}`), 204);
  });

  it("refuses runs once the daily compute time is used up", async () => {
    const tight = await startTestDaemon({ FREE_DAILY_COMPUTE_TIME_QUOTA_MS: "20" });
    try {
      const u = await tight.createUser("free");
      const s = await createSource(u.api, WORKER);
      const url = s.configured_props.http.endpoint_url;
      const http = client(tight.url);
      expectStatus(await http.post(url, { json: {} }), 200);
      await waitFor(async () => (await me(u.api)).daily_compute_time_used >= 30, { what: "compute time to be counted" });
      const refused = await http.post(url, { json: {} });
      expectStatus(refused, 429);
      expect(refused.body.code).toBe("quota_exceeded");
      expect(refused.body.error).toMatch(/compute time/);
      expect((await me(u.api)).daily_invocations_used).toBe(1);
    } finally {
      await tight.close();
    }
  });
});

describe("paid plan", () => {
  it("accumulates billing_period_invocations and is not held to the free quota", async () => {
    const u = await td.createUser("paid");
    const start = await me(u.api);
    expect(start.billing_period_invocations).toBe(0);
    expect(start).not.toHaveProperty("daily_invocations_used");
    const s = await createSource(u.api, WORKER);
    const runs = QUOTA + 2;
    for (let i = 0; i < runs; i++) expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: { i } }), 200);
    await waitFor(async () => (await me(u.api)).billing_period_invocations === runs, { what: `${runs} billed invocations` });
    expect(await events(u.api, s.id)).toHaveLength(runs);
    expect(await events(u.api, s.id, "$errors")).toEqual([]);
  });
});
