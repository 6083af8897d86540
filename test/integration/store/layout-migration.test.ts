import path from "node:path";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../../src/cli/run.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { schedulerId } from "../../../src/runtime/timers.js";
import { createKeys, type Keys } from "../../../src/store/keys.js";
import { client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { createWebhook, emit, subscribe, workflowId } from "../../helpers/delivery-e2e.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "../../helpers/redis.js";

/**
 * Layout 1 -> layout 2 (store/layout-migration.ts) on a data set in layout 1's names: made through
 * the HTTP API (a user with a webhook, a subscription, a delivered event, a timer source and a
 * workflow's events), plus what only a stopped layout-1 deployment holds: an event accepted and
 * not yet fanned out, a delayed maintenance job and the timer's job scheduler under `{bull}`.
 * The data is then renamed to layout 1's key names (what version 72959ca wrote: user keys under
 * `{<user id>}`, one outbox under the global tag, every queue under `{bull}`), migrated by
 * `tributary migrate`, and read back through a daemon of this version.
 */

/** Counts its runs in db and emits one event per tick. */
const TICKER = `module.exports = {
  key: "mig-ticker",
  name: "Migration Ticker",
  version: "0.0.1",
  props: { db: "$.service.db", timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } } },
  async run() {
    const n = (this.db.get("n") || 0) + 1;
    this.db.set("n", n);
    this.$emit({ n }, { id: String(n), summary: "tick " + n });
  },
};
`;

const prefix = testPrefix();
const keys = createKeys(prefix);
const env = { REDIS_URL: "", REDIS_KEY_PREFIX: prefix, LOG_LEVEL: "silent" };
let redis: Redis;
let rx: Receiver;
let td: TestDaemon | undefined;

beforeAll(async () => {
  redis = connectRedis();
  rx = await startReceiver();
  env.REDIS_URL = redisUrl();
});

afterAll(async () => {
  await td?.daemon.close();
  await rx?.close();
  await dropPrefix(redis, prefix);
  redis?.disconnect();
});

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(
    argv,
    env,
    { stdout: (t) => out.push(t), stderr: (t) => err.push(t) },
    { registryDir: path.resolve(import.meta.dirname, "../../../registry") },
  );
  return { code, out: out.join(""), err: err.join("") };
}

const queue = (name: string, at: string) => new Queue(name, { connection: redis, prefix: at });

/** Every key name layout 1 would have given this data: the reverse of the migration, done by hand. */
async function renameToLayout1(k: Keys, userIds: readonly string[]): Promise<void> {
  for (const id of userIds) {
    let cursor = "0";
    do {
      const [next, found] = await redis.scan(cursor, "MATCH", k.userPattern(id), "COUNT", 1000);
      cursor = next;
      for (const key of found) await redis.rename(key, `${k.legacyUserKey(id)}${key.slice(k.userKeyBase(id).length)}`);
    } while (cursor !== "0");
  }
  for (let shard = 0; shard < k.shards; shard++) {
    for (const [, fields] of (await redis.xrange(k.shardOutbox(shard), "-", "+")) as [string, string[]][]) {
      await redis.xadd(k.legacyOutbox(), "*", ...fields);
    }
    await redis.del(k.shardOutbox(shard));
  }
  // The timer's scheduler as layout 1's scheduler role made it: same id, repeat and template, under {bull}.
  const timers = queue(QUEUES.timers, k.queuePrefix("timers"));
  const legacyTimers = queue(QUEUES.timers, k.legacyBullPrefix);
  for (const s of await timers.getJobSchedulers()) {
    await legacyTimers.upsertJobScheduler(
      s.key,
      { every: Number(s.every) },
      { name: s.name, data: s.template?.data, opts: s.template?.opts },
    );
  }
  await timers.obliterate({ force: true });
  await Promise.all([timers.close(), legacyTimers.close()]);
  await redis.del(k.layout());
}

describe("migrating layout 1 to layout 2", () => {
  it("moves users' data, the outbox, jobs and timers so that a daemon of this version finds them all", async () => {
    // ---- a deployment's data, made through the API ----
    td = await startTestDaemon({ REDIS_KEY_PREFIX: prefix });
    const user = await td.createUser();
    const hook = await createWebhook(user.api, rx.url("/hook"));
    const wf = workflowId();
    await subscribe(user.api, wf, hook.id);
    await emit(user.api, wf, { n: 1 });
    await rx.waitFor((r) => r.to("/hook").length >= 1, { what: "the first delivery" });
    const wfOther = workflowId();
    await emit(user.api, wfOther, { doomed: true });
    const ticker = await user.api.post("/v1/sources", {
      json: { component_code: TICKER, configured_props: { timer: { intervalSeconds: 1 } } },
    });
    expect(ticker.status, ticker.text).toBe(200);
    const sourceId = ticker.body.data.id as string;
    const ticks = async () =>
      ((await user.api.get(`/v1/sources/${sourceId}/event_summaries`, { query: { limit: 100 } })).body.data as unknown[]).length;
    await waitFor(async () => (await ticks()) >= 1, { what: "a first tick" });
    await waitFor(
      async () => {
        const { data } = (await user.api.get(`/v1/webhooks/${hook.id}/deliveries`)).body;
        return data.length === 1 && data[0].status === "delivered";
      },
      { what: "the delivery recorded" },
    );
    await td.daemon.close();

    // An event accepted by an api-only process: recorded, never fanned out (no worker ran).
    td = await startTestDaemon({ REDIS_KEY_PREFIX: prefix, ROLES: "api" });
    await emit(client(td.url, user.api_key), wf, { n: 2 });
    await td.daemon.close();
    td = undefined;
    const ticksBefore = await countTicks(sourceId, user.id);

    // ---- layout 1's names, and what a stopped layout-1 deployment held under {bull} ----
    await renameToLayout1(keys, [user.id]);
    const legacyMaintenance = queue(QUEUES.maintenance, keys.legacyBullPrefix);
    const job = { kind: "delete-events", userId: user.id, emitterId: wfOther, channel: "", startId: null, endId: null };
    // As the API queues it (a counter id, like every maintenance job), delayed here.
    const queued = await legacyMaintenance.add("delete-events", job, {
      removeOnComplete: true,
      removeOnFail: 1000,
      attempts: 3,
      delay: 60_000,
    });
    await legacyMaintenance.close();
    expect(await redis.exists(keys.legacyUserKey(user.id) + ":user")).toBe(1);
    expect(await redis.xlen(keys.legacyOutbox())).toBe(1);

    // ---- tributary migrate ----
    const run = await cli("migrate");
    expect(run.code, run.err).toBe(0);
    const report = JSON.parse(run.out);
    expect(report.layout).toEqual({ version: 2, outbox_shards: 16 });
    expect(report.moved).toMatchObject({ users: 1, outboxEntries: 1, jobs: { maintenance: 1 }, jobSchedulers: 1 });
    expect(report.moved.keysRenamed).toBeGreaterThan(10);
    expect(await redis.exists(keys.user(user.id), keys.webhook(user.id, hook.id), keys.source(user.id, sourceId))).toBe(3);
    expect(await scanCount(`${prefix}:{u_*`)).toBe(0);
    expect(await redis.exists(keys.legacyOutbox())).toBe(0);
    const moved = await redis.xrange(keys.outboxOf(user.id), "-", "+");
    expect(moved).toHaveLength(1);
    expect(moved[0]?.[1]).toEqual(expect.arrayContaining(["u", user.id, "e", wf]));
    // The delayed job kept its id, data and about the delay it had left.
    const maintenance = queue(QUEUES.maintenance, keys.queuePrefix("maintenance"));
    const movedJob = await maintenance.getJob(`layout1-${queued.id}`);
    expect(movedJob?.data).toEqual(job);
    expect(await movedJob?.getState()).toBe("delayed");
    // Due when it was: the same creation time and delay.
    expect(movedJob?.timestamp).toBe(queued.timestamp);
    expect(movedJob?.delay).toBe(60_000);
    // The timer's scheduler lives under the new prefix only: one scheduler, one tick per interval.
    const timers = queue(QUEUES.timers, keys.queuePrefix("timers"));
    const legacyTimers = queue(QUEUES.timers, keys.legacyBullPrefix);
    expect(await timers.getJobScheduler(schedulerId(sourceId))).toBeDefined();
    expect(await legacyTimers.getJobSchedulersCount()).toBe(0);

    // ---- a re-run moves nothing more ----
    const again = await cli("migrate");
    expect(again.code, again.err).toBe(0);
    expect(JSON.parse(again.out).moved).toEqual({
      keysRenamed: 0,
      users: 0,
      outboxEntries: 0,
      jobs: { "source-run": 0, maintenance: 0, timers: 0 },
      jobSchedulers: 0,
    });

    // ---- a daemon of this version on the migrated data ----
    // The job is due now (as if its delay had run out while the daemon was down).
    await movedJob?.promote();
    td = await startTestDaemon({ REDIS_KEY_PREFIX: prefix });
    const api = client(td.url, user.api_key);
    expect((await api.get("/v1/users/me")).body.data.id).toBe(user.id);
    expect((await api.get(`/v1/webhooks/${hook.id}`)).status).toBe(200);
    const subs = (await api.get("/v1/users/me/subscriptions")).body.data as { emitter_id: string; listener_id: string }[];
    expect(subs).toEqual(expect.arrayContaining([expect.objectContaining({ emitter_id: wf, listener_id: hook.id })]));
    const deliveries = (await api.get(`/v1/webhooks/${hook.id}/deliveries`)).body.data as { status: string }[];
    expect(deliveries[0]?.status).toBe("delivered");
    const wfEvents = (await api.get(`/v1/workflows/${wf}/event_summaries`)).body.data as unknown[];
    expect(wfEvents).toHaveLength(2);
    // The timer keeps ticking, from the same db state.
    await waitFor(async () => (await countTicks(sourceId, user.id)) >= ticksBefore + 2, {
      what: "ticks after the migration",
      timeoutMs: 15_000,
    });
    // The maintenance job ran under its new prefix.
    await waitFor(async () => ((await api.get(`/v1/workflows/${wfOther}/event_summaries`)).body.data as unknown[]).length === 0, {
      what: "the moved maintenance job to delete the events",
    });
    // The pending outbox entry is delivered once fan-out reads the shard outboxes (the outbox
    // helper's change); until then it waits in its shard's outbox.
    if (!("outbox" in keys)) {
      await rx.waitFor((r) => r.to("/hook").length >= 2, { what: "the pending event's delivery" });
      expect(rx.to("/hook")[1]?.json).toMatchObject({ n: 2 });
    } else {
      expect(await redis.xlen(keys.outboxOf(user.id))).toBe(1);
    }
    await Promise.all([maintenance.close(), timers.close(), legacyTimers.close()]);

    async function countTicks(id: string, _user: string): Promise<number> {
      return Number(await redis.xlen(keys.events(_user, id, "")));
    }
  }, 120_000);
});

async function scanCount(pattern: string): Promise<number> {
  let n = 0;
  let cursor = "0";
  do {
    const [next, found] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    cursor = next;
    n += found.length;
  } while (cursor !== "0");
  return n;
}

describe("a daemon started on layout-1 data", () => {
  it("migrates it by itself, once, while another process starting at the same time waits for it", async () => {
    const own = testPrefix();
    const k = createKeys(own);
    const first = await startTestDaemon({ REDIS_KEY_PREFIX: own });
    const user = await first.createUser();
    const hook = await createWebhook(user.api, rx.url("/own-hook"));
    await first.daemon.close();
    await renameToLayout1(k, [user.id]);
    expect(await redis.exists(k.user(user.id))).toBe(0);

    const [a, b] = await Promise.all([
      startTestDaemon({ REDIS_KEY_PREFIX: own, ROLES: "api" }),
      startTestDaemon({ REDIS_KEY_PREFIX: own, ROLES: "api" }),
    ]);
    try {
      for (const d of [a, b]) expect((await client(d.url, user.api_key).get(`/v1/webhooks/${hook.id}`)).status).toBe(200);
      expect(await redis.hgetall(k.layout())).toEqual({ version: "2", outbox_shards: "16" });
      expect(await redis.exists(k.layoutLock())).toBe(0);
      expect(await scanCount(`${own}:{u_*`)).toBe(0);
    } finally {
      await Promise.all([a.daemon.close(), b.daemon.close()]);
      await dropPrefix(redis, own);
    }
  }, 60_000);
});
