import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { deliveryIdFor } from "../../../src/domain/ids.js";
import { FANOUT_GROUP } from "../../../src/events/fanout.js";
import { type AckToken, ReplicaAck } from "../../../src/store/replica-ack.js";
import { runStreamLength } from "../../../src/store/run-stream.js";
import { waitFor } from "../../helpers/receiver.js";
import {
  createGroup,
  deliveryWorker,
  fanout,
  fanoutRegistry,
  installPipeline,
  jobIds,
  newUserId,
  newWebhook,
  outboxEntries,
  outboxLength,
  outboxPending,
  recordEvents,
  rx,
  w,
} from "../../helpers/pipeline.js";

/**
 * Fan-out against real Redis and BullMQ (ARCHITECTURE "the way an event travels"): a redone
 * fan-out adds no second job or delivery, an emitter nobody listens to gets no outbox entry,
 * entries a dead consumer left pending are taken over, and consumers of stopped processes are pruned.
 */

installPipeline();

describe("fan-out redo", () => {
  it("adds one job and one delivery per event and listener, however often an entry is fanned out", async () => {
    const userId = newUserId();
    const path = `/redo-${randomBytes(4).toString("hex")}`;
    const hook = await newWebhook(userId, path);
    const emitter = "p_redo";
    await w.subscriptions.create(userId, emitter, hook.id, "");
    await w.subscriptions.create(userId, "p_*", hook.id, "default"); // the same listener again, through a glob
    await w.subscriptions.create(userId, emitter, "dc_listener0001", "");
    await createGroup();
    const ids = await recordEvents(userId, emitter, 3);
    const entries = await outboxEntries();
    expect(entries).toHaveLength(3);

    const f = fanout("redo");
    await f.process(entries);
    const counted = async (kind: string) =>
      (await fanoutRegistry.getSingleMetric("tributary_fanout_deliveries_total")?.get())?.values.find(
        (v) => v.labels.listener_kind === kind,
      )?.value;
    expect(await counted("webhook")).toBe(3); // exact and glob subscription: one job per event
    expect(await counted("source")).toBe(3);
    await f.process(entries); // a crash between the jobs and the XACK makes the entry come back
    const expectedDeliveries = ids.map((eventId) => deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId }, hook.id)).sort();
    expect(await jobIds(w.deliveryQueue)).toEqual(expectedDeliveries);
    // Source listeners' runs: one run stream entry each, however often the entry is fanned out.
    expect(await runStreamLength(w.redis, w.keys)).toBe(3);
    // The attempt log gets a record when the first attempt ends, not at fan-out.
    expect(await w.redis.zcard(w.keys.deliveries(userId, hook.id))).toBe(0);
    expect(await outboxLength()).toBe(0);

    // Delivered once each...
    deliveryWorker().start();
    await rx.waitFor((r) => r.to(path).length >= 3, { what: "3 deliveries" });
    const delivered = async () => {
      const page = await w.attemptLog.list(userId, hook.id, { limit: 10 });
      return page.data.length === 3 && page.data.every((d) => d.status === "delivered");
    };
    await waitFor(delivered, { what: "3 delivered records" });

    // ...and a redo after delivery finds the completed jobs and adds nothing.
    await f.process(entries);
    expect(await jobIds(w.deliveryQueue)).toEqual(expectedDeliveries);
    expect((await w.deliveryQueue.getJobCounts("wait", "active", "delayed")).wait).toBe(0);

    // Once the completed jobs are gone (removeOnComplete), a redo adds jobs again; the worker
    // finds the deliveries done in the attempt log and sends nothing.
    for (const job of await w.deliveryQueue.getJobs(["completed"])) await job.remove();
    await f.process(entries);
    await waitFor(async () => (await w.deliveryQueue.getJobCounts("completed")).completed === 3, {
      what: "the redone jobs to complete",
    });
    expect(
      rx
        .to(path)
        .map((r) => r.headers["x-tributary-event-id"])
        .sort(),
    ).toEqual([...ids].sort());
  });
});

describe("record without listeners", () => {
  it("writes the summary but no outbox entry for an emitter nobody subscribes to, on any channel", async () => {
    const userId = newUserId();
    const channelOf = async (emitterId: string, channel: string) =>
      w.events.record({
        userId,
        emitterId,
        emitterKind: "workflow",
        channel,
        events: [{ payload: { channel }, meta: {}, emitId: "emit_x" }],
        acceptedAtMs: Date.now(),
      });
    await channelOf("p_quiet", "");
    expect(await outboxLength()).toBe(0);
    expect(await w.redis.xlen(w.keys.events(userId, "p_quiet", ""))).toBe(1);

    // An exact subscription on another channel does not count; one on this channel does.
    await w.subscriptions.create(userId, "p_quiet", "wh_listener0001", "other");
    await channelOf("p_quiet", "");
    expect(await outboxLength()).toBe(0);
    await channelOf("p_quiet", "other");
    expect(await outboxLength()).toBe(1);

    // A glob subscription covers every emitter of its kind ("default" and "" are one channel)...
    await w.subscriptions.create(userId, "p_*", "wh_listener0001", "default");
    await channelOf("p_another", "");
    expect(await outboxLength()).toBe(2);
    // ...but not the other kind, nor another user.
    await channelOf("dc_source000001", "");
    await w.events.record({
      userId: newUserId(),
      emitterId: "p_quiet",
      emitterKind: "workflow",
      channel: "",
      events: [{ payload: {}, meta: {}, emitId: "emit_y" }],
      acceptedAtMs: Date.now(),
    });
    expect(await outboxLength()).toBe(2);
  });
});

describe("fan-out takeover", () => {
  it("takes over entries a dead consumer read but never acknowledged, once they are idle", async () => {
    const userId = newUserId();
    const emitter = "p_takeover";
    await w.subscriptions.create(userId, emitter, "wh_listener0001", "");
    await createGroup();
    const ids = await recordEvents(userId, emitter, 5);
    // A consumer reads the entries and dies before fanning them out.
    await w.redis.xreadgroup("GROUP", FANOUT_GROUP, "dead-consumer", "COUNT", 100, "STREAMS", w.keys.outboxOf(userId), ">");
    const readAt = Date.now();
    const pendingSummary = (await w.redis.xpending(w.keys.outboxOf(userId), FANOUT_GROUP)) as [number, string, string, [string, string][]];
    expect(pendingSummary[0]).toBe(5);
    expect(pendingSummary[3]).toEqual([["dead-consumer", "5"]]);

    const claimIdleMs = 300;
    await fanout("live-consumer", claimIdleMs).start();
    const expected = ids.map((eventId) => deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId }, "wh_listener0001")).sort();
    await waitFor(async () => (await jobIds(w.deliveryQueue)).length === 5, { what: "5 delivery jobs", timeoutMs: 10_000 });
    expect(await jobIds(w.deliveryQueue)).toEqual(expected);
    const jobs = await w.deliveryQueue.getJobs(["wait"]);
    // Not taken before the entries had been idle for claimIdleMs.
    expect(Math.min(...jobs.map((j) => j.timestamp)) - readAt).toBeGreaterThanOrEqual(claimIdleMs - 20);
    await waitFor(async () => (await outboxPending()) === 0, {
      what: "the pending list to empty",
    });
    expect(await outboxLength()).toBe(0);

    // The live consumer also reads new entries the normal way.
    const [late] = await recordEvents(userId, emitter, 1);
    const lateId = deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId: late! }, "wh_listener0001");
    await waitFor(async () => (await jobIds(w.deliveryQueue)).includes(lateId), { what: "the job of a new entry" });
  });
});

describe("fan-out with REDIS_MIN_REPLICAS_ACK", () => {
  it("acknowledges an entry only once the writes it caused are confirmed by replicas", async () => {
    const userId = newUserId();
    const emitter = "p_replicas";
    await w.subscriptions.create(userId, emitter, "wh_listener0001", "");
    await createGroup();
    // A real WAIT on this Redis, which has no replica: it confirms 0 of 1 until the test lets it pass.
    const wait = new ReplicaAck([w.redis], 1, 50);
    let confirms = 0;
    let refuse = true;
    const replicas = {
      begin: () => wait.begin(),
      confirm: async (t: AckToken) => {
        confirms++;
        if (refuse) await wait.confirm(t);
      },
    };
    const ids = await recordEvents(userId, emitter, 3);
    await fanout("replica-consumer", 300, undefined, w.blocking, replicas).start();
    const expected = ids.map((eventId) => deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId }, "wh_listener0001")).sort();
    await waitFor(async () => (await jobIds(w.deliveryQueue)).length === 3, { what: "3 delivery jobs", timeoutMs: 10_000 });
    expect(await jobIds(w.deliveryQueue)).toEqual(expected);
    // Refused at the first fan-out and again when the idle entries were taken over (redone): still pending.
    await waitFor(async () => confirms >= 2, { what: "a redo of the unconfirmed entries", timeoutMs: 10_000 });
    expect(await outboxPending()).toBe(3);
    refuse = false;
    await waitFor(async () => (await outboxPending()) === 0, { what: "the entries acknowledged once confirmed", timeoutMs: 10_000 });
    // The redo added no second job.
    expect(await jobIds(w.deliveryQueue)).toEqual(expected);
  });
});

describe("fan-out consumers", () => {
  const userId = newUserId();
  const consumers = async () =>
    ((await w.redis.xinfo("CONSUMERS", w.keys.outboxOf(userId), FANOUT_GROUP)) as string[][]).map((c) => ({
      name: c[1],
      pending: Number(c[3]),
    }));

  it("registers itself at start and prunes idle consumers of stopped processes, never one with pending entries", async () => {
    await createGroup();
    // A stopped process that read nothing, and a dead one that left an entry pending.
    await w.redis.xgroup("CREATECONSUMER", w.keys.outboxOf(userId), FANOUT_GROUP, "stopped-consumer");
    await w.subscriptions.create(userId, "p_prune", "wh_listener0001", "");
    await recordEvents(userId, "p_prune", 1);
    await w.redis.xreadgroup("GROUP", FANOUT_GROUP, "dead-consumer", "COUNT", 10, "STREAMS", w.keys.outboxOf(userId), ">");

    const f = fanout("live-consumer", 60_000);
    await f.start();
    expect((await consumers()).map((c) => c.name).sort()).toEqual(["dead-consumer", "live-consumer", "stopped-consumer"]);
    // Idle for an hour: none yet.
    expect(await f.pruneConsumers()).toBe(0);
    // Idle at all: the stopped one goes; the dead one keeps its pending entry for takeover, and the caller stays.
    expect(await f.pruneConsumers(0)).toBe(1);
    expect(await consumers()).toEqual([
      { name: "dead-consumer", pending: 1 },
      { name: "live-consumer", pending: 0 },
    ]);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: subscription matching equals a reference model
