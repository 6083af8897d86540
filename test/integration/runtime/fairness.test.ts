import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { type Json, createSource, events, expectStatus } from "./support.js";

/**
 * Fair and metered between users (issue 12 item 6, found by a red-team review; docs/security.md
 * "Fair share"): one user's lifecycle hooks, backlog of queued runs, inline runs and fetches cannot
 * take what another user's runs need. Each test asserts an outcome or an ordering with generous
 * bounds, never a tight timing: they hold with one core busy.
 */

/**
 * A loopback server that holds each request `holdMs` before answering `bodyBytes` bytes, and
 * counts the requests in flight per `?who=` tag (the most at once, and arrival order).
 */
interface SlowServer {
  url(who: string): string;
  maxInFlight(who: string): number;
  arrivals: string[];
  close(): Promise<void>;
}

async function startSlowServer(holdMs: number, bodyBytes = 2): Promise<SlowServer> {
  const inFlight = new Map<string, number>();
  const max = new Map<string, number>();
  const arrivals: string[] = [];
  const body = Buffer.alloc(bodyBytes, "x");
  const server: Server = createServer((req, res) => {
    const who = new URL(req.url ?? "/", "http://x").searchParams.get("who") ?? "";
    arrivals.push(who);
    const n = (inFlight.get(who) ?? 0) + 1;
    inFlight.set(who, n);
    max.set(who, Math.max(max.get(who) ?? 0, n));
    const done = () => inFlight.set(who, (inFlight.get(who) ?? 1) - 1);
    const timer = setTimeout(() => {
      done();
      res.writeHead(200, { "content-type": "text/plain", "content-length": String(body.length) });
      res.end(body);
    }, holdMs);
    req.on("close", () => {
      if (!res.writableEnded) {
        clearTimeout(timer);
        done();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: (who) => `http://127.0.0.1:${port}/?who=${who}`,
    maxInFlight: (who) => max.get(who) ?? 0,
    arrivals,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

async function me(api: Client): Promise<Json> {
  const res = await api.get("/v1/users/me");
  expectStatus(res, 200);
  return res.body.data;
}

/** A source whose deploy hook fetches `url` (held by the slow server) and whose run emits. */
const slowDeploy = (url: string) => `module.exports = {
  name: "Slow deploy",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  hooks: { async deploy() { await fetch(${JSON.stringify(url)}); } },
  async run(event) { this.$emit({ n: event.body && event.body.n }); },
};
`;

const HEALTHY = `module.exports = {
  name: "Healthy",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) { this.$emit({ n: event.body && event.body.n }); },
};
`;

describe("lifecycle hooks", () => {
  const HOLD_MS = 1500;
  let td: TestDaemon;
  let slow: SlowServer;

  beforeAll(async () => {
    td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "8000", SOURCE_HOOK_CONCURRENCY_PER_USER: "2" });
    slow = await startSlowServer(HOLD_MS);
  });

  afterAll(async () => {
    await slow?.close();
    await td?.close();
  });

  it("runs at most SOURCE_HOOK_CONCURRENCY_PER_USER of a user's hooks at once, counts their time, and serves another user meanwhile", async () => {
    const attacker = await td.createUser();
    const victim = await td.createUser();
    const healthy = await createSource(victim.api, HEALTHY);
    expect((await me(attacker.api)).daily_compute_time_used).toBe(0);

    const creates = Array.from({ length: 6 }, () =>
      attacker.api.post("/v1/sources", { json: { component_code: slowDeploy(slow.url("attacker")) } }),
    );
    let createsDone = 0;
    for (const c of creates) void c.then(() => createsDone++);
    await waitFor(() => slow.maxInFlight("attacker") > 0, { what: "the attacker's first hook" });

    // The victim's run goes through while the attacker's hooks are still queued behind each other.
    expectStatus(await client(td.url).post(healthy.configured_props.http.endpoint_url, { json: { n: 1 } }), 200);
    await waitFor(async () => (await events(victim.api, healthy.id)).length === 1, { timeoutMs: 15_000, what: "the victim's run" });
    expect(createsDone, "the victim's run waited for the attacker's hooks").toBeLessThan(creates.length);

    const replies = await Promise.all(creates);
    const ok = replies.filter((r) => r.status === 200).length;
    for (const r of replies) expect([200, 429], r.text).toContain(r.status);
    expect(ok).toBeGreaterThanOrEqual(2);
    // Never more than the cap at once (6 before hooks were capped).
    expect(slow.maxInFlight("attacker")).toBeLessThanOrEqual(2);
    // Each deploy that ran held the sandbox at least HOLD_MS (awaits count, as for runs).
    const used = (await me(attacker.api)).daily_compute_time_used;
    expect(used).toBeGreaterThanOrEqual(ok * HOLD_MS * 0.9);
  });
});

describe("queued source runs", () => {
  const BACKLOG = 300;
  let td: TestDaemon;
  let slow: SlowServer;

  beforeAll(async () => {
    td = await startTestDaemon({ SOURCE_RUN_CONCURRENCY: "2" });
    slow = await startSlowServer(50);
  });

  afterAll(async () => {
    await slow?.close();
    await td?.close();
  });

  it("serves another user's run before one user's backlog of listener runs drains (round-robin by user)", async () => {
    const a = await td.createUser("paid");
    const burst = await createSource(
      a.api,
      `module.exports = {
        name: "Burst", version: "0.0.1", props: { http: "$.interface.http" },
        async run() { for (let i = 0; i < ${BACKLOG}; i++) this.$emit({ i }); },
      };`,
    );
    const listener = await createSource(
      a.api,
      `module.exports = {
        name: "Slow listener", version: "0.0.1", props: {},
        async run() { await fetch(${JSON.stringify(slow.url("a"))}); },
      };`,
    );
    expectStatus(await a.api.post("/v1/subscriptions", { query: { emitter_id: burst.id, listener_id: listener.id } }), 200);
    const b = await td.createUser();
    const victim = await createSource(
      b.api,
      `module.exports = {
        name: "Victim", version: "0.0.1", props: { http: "$.interface.http" },
        async run() { await fetch(${JSON.stringify(slow.url("b"))}); },
      };`,
    );

    expectStatus(await client(td.url).post(burst.configured_props.http.endpoint_url, { json: {} }), 200);
    // The backlog is queued (fan-out adds the runs in batches, far faster than they run).
    await waitFor(() => slow.arrivals.filter((w) => w === "a").length >= 5, { timeoutMs: 20_000, what: "the backlog to start" });
    expectStatus(await client(td.url).post(victim.configured_props.http.endpoint_url, { json: {} }), 200);
    await waitFor(() => slow.arrivals.includes("b"), { timeoutMs: 60_000, what: "the victim's run" });
    const before = slow.arrivals.indexOf("b");
    // FIFO ran the whole backlog first (~300 runs ahead); round-robin runs it within a few.
    expect(before, `the victim's run came after ${before} of the backlog's runs`).toBeLessThan(BACKLOG / 2);
    await waitFor(() => slow.arrivals.filter((w) => w === "a").length === BACKLOG, { timeoutMs: 60_000, what: "the backlog to drain" });
  });
});

describe("inline (customResponse) runs", () => {
  const HOLD_MS = 6000;
  let td: TestDaemon;
  let slow: SlowServer;

  beforeAll(async () => {
    td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "15000", SOURCE_INLINE_ISOLATES: "2" });
    slow = await startSlowServer(HOLD_MS);
  });

  afterAll(async () => {
    await slow?.close();
    await td?.close();
  });

  const inline = (run: string) => `module.exports = {
    name: "Inline", version: "0.0.1",
    props: { http: { type: "$.interface.http", customResponse: true } },
    async run(event) { ${run} },
  };`;

  it("answers 503 with Retry-After, without waiting out their runs, when other users hold every inline isolate", async () => {
    const http = client(td.url);
    const holders = await Promise.all(
      [1, 2].map(async (i) => {
        const u = await td.createUser();
        return createSource(
          u.api,
          inline(`await fetch(${JSON.stringify(slow.url(`holder${i}`))}); this.http.respond({ status: 200, body: "late" });`),
        );
      }),
    );
    const v = await td.createUser();
    const victim = await createSource(v.api, inline(`this.http.respond({ status: 200, body: "hi" });`));

    let holdersDone = false;
    const held = Promise.all(holders.map((s) => http.post(s.configured_props.http.endpoint_url, { json: {} }))).then((r) => {
      holdersDone = true;
      return r;
    });
    await waitFor(() => slow.maxInFlight("holder1") > 0 && slow.maxInFlight("holder2") > 0, {
      what: "both users' runs to hold an isolate",
    });

    const busy = await http.post(victim.configured_props.http.endpoint_url, { json: {} });
    expect(holdersDone, "the victim waited for the holders' runs to end").toBe(false);
    expectStatus(busy, 503);
    expect(Number(busy.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);

    for (const r of await held) expectStatus(r, 200);
    const after = await http.post(victim.configured_props.http.endpoint_url, { json: {} });
    expectStatus(after, 200);
    expect(after.text).toBe("hi");
  });
});

describe("fetches of one run", () => {
  const BODY = 5_000_000;
  let td: TestDaemon;
  let slow: SlowServer;

  beforeAll(async () => {
    td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "30000", SANDBOX_MEMORY_MB: "128" });
    slow = await startSlowServer(500, BODY);
  });

  afterAll(async () => {
    await slow?.close();
    await td?.close();
  });

  it("keeps at most 4 of a run's fetches in flight and stops at its byte budget: 100 concurrent 5 MB fetches do not grow the daemon by hundreds of MB", async () => {
    const u = await td.createUser();
    const s = await createSource(
      u.api,
      `module.exports = {
        name: "Fetch storm", version: "0.0.1", props: { http: "$.interface.http" },
        async run() {
          const rs = await Promise.allSettled(Array.from({ length: 100 }, () => fetch(${JSON.stringify(slow.url("storm"))}).then((r) => r.text()).then((t) => t.length)));
          const ok = rs.filter((r) => r.status === "fulfilled").length;
          const failed = rs.filter((r) => r.status === "rejected").map((r) => String(r.reason && r.reason.message || r.reason));
          this.$emit({ ok, failed: failed.length, reason: failed[failed.length - 1] });
        },
      };`,
    );
    global.gc?.();
    const base = process.memoryUsage().rss;
    let peak = base;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 20);
    try {
      expectStatus(await client(td.url).post(s.configured_props.http.endpoint_url, { json: {} }), 200);
      const [e] = await waitFor(
        async () => {
          const list = await events(u.api, s.id);
          return list.length > 0 ? list : undefined;
        },
        { timeoutMs: 60_000, what: "the storm's result" },
      );
      expect(slow.maxInFlight("storm")).toBeLessThanOrEqual(4);
      // 20 MB of bodies per run: four 5 MB responses, then a clear error for the rest.
      expect(e.event.ok).toBeGreaterThanOrEqual(1);
      expect(e.event.ok).toBeLessThanOrEqual(5);
      expect(e.event.failed).toBe(100 - e.event.ok);
      expect(e.event.reason).toMatch(/limit|large/i);
      expect(await events(u.api, s.id, "$errors")).toEqual([]);
    } finally {
      clearInterval(sampler);
    }
    // 100 x 5 MB buffered at once was ~1 GB; 4 in flight is tens of MB (generous for GC lag).
    expect((peak - base) / 2 ** 20, "RSS growth in MB").toBeLessThan(250);
  });
});
