import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import type { DeliveryRecord } from "../../../src/store/attempt-log.js";
import { continueDelivery, newDeliveryJob, readDeliveryJob, recordBaseOf, replayJob, replayJobId } from "../../../src/delivery/jobs.js";
import { prepareRequest } from "../../../src/delivery/prepare.js";
import { JOB_STARTS } from "../../../src/domain/delivery-plan.js";

/** Every delivery job is built and read in delivery/jobs.ts; the request an attempt sends in delivery/prepare.ts. */

const event = { userId: "u_1", emitterId: "p_orders", channel: "", eventId: "1700000000000-3", payload: '{"n":1}', acceptedAtMs: 1234 };
const fanoutJob = newDeliveryJob(event, "wh_hook", "webhook", "d_abc", JOB_STARTS.fanout);

/** A job exactly as the version before `origin` wrote it to Redis. */
const legacyData = {
  userId: "u_1",
  deliveryId: "d_abc",
  listenerKind: "webhook",
  listenerId: "wh_hook",
  emitterId: "p_orders",
  channel: "",
  eventId: "1700000000000-3",
  payload: '{"n":1}',
  acceptedAtMs: 1234,
};

describe("delivery jobs", () => {
  it("carry their origin and their position in the schedule", () => {
    expect(fanoutJob).toEqual({ ...legacyData, origin: "fanout", priorAttempts: 0 });
    expect(continueDelivery(fanoutJob, JOB_STARTS.directRetry)).toEqual({ ...legacyData, origin: "direct-retry", priorAttempts: 1 });
  });

  it("mark a redo job `redo: true` too, so a worker of the previous version reads its record first", () => {
    expect(continueDelivery(fanoutJob, JOB_STARTS.redo)).toEqual({ ...legacyData, origin: "redo", priorAttempts: 0, redo: true });
    expect(newDeliveryJob(event, "p_flow", "workflow", "d_def", JOB_STARTS.redo).redo).toBe(true);
  });

  it("read back as written", () => {
    for (const job of [fanoutJob, continueDelivery(fanoutJob, JOB_STARTS.directRetry), continueDelivery(fanoutJob, JOB_STARTS.redo)]) {
      expect(readDeliveryJob(JSON.parse(JSON.stringify(job)), job.deliveryId)).toEqual(job);
    }
  });

  it.each([
    ["a plain job", legacyData, "d_abc", { origin: "fanout", priorAttempts: 0 }],
    ["a retry after a direct attempt", { ...legacyData, priorAttempts: 1 }, "d_abc", { origin: "direct-retry", priorAttempts: 1 }],
    ["a redo", { ...legacyData, redo: true }, "d_abc", { origin: "redo", priorAttempts: 0, redo: true }],
    ["a replay", legacyData, "d_abc-r2", { origin: "replay", priorAttempts: 0 }],
  ])("read a job of the previous version (%s) with the origin it would have inferred", (_name, data, jobId, expected) => {
    expect(readDeliveryJob(data, jobId)).toEqual({ ...legacyData, ...expected });
  });

  it("carry the hops of the event's chain through retries and read them back (absent = 0 for older jobs)", () => {
    const chained = newDeliveryJob({ ...event, emitterId: "dc_up", hops: 4 }, "wh_hook", "webhook", "d_hop", JOB_STARTS.fanout);
    expect(chained.hops).toBe(4);
    const retry = continueDelivery(chained, JOB_STARTS.directRetry);
    expect(retry.hops).toBe(4);
    expect(readDeliveryJob(JSON.parse(JSON.stringify(retry)), retry.deliveryId)).toEqual(retry);
    expect(fanoutJob).not.toHaveProperty("hops");
    expect(() => readDeliveryJob({ ...legacyData, hops: -1 }, "d_abc")).toThrow();
  });

  it("refuse a malformed job", () => {
    expect(() => readDeliveryJob({ ...legacyData, listenerKind: "source" }, "d_abc")).toThrow();
    expect(() => readDeliveryJob({ ...legacyData, origin: "elsewhere" }, "d_abc")).toThrow();
  });

  it("replay a recorded delivery from its record, under a job id of its own", () => {
    const record: DeliveryRecord = {
      ...recordBaseOf(fanoutJob),
      status: "failed",
      attempts: [],
      created_at: 1,
      updated_at: 2,
      replays: 1,
    };
    expect(replayJob(record)).toEqual({ ...legacyData, origin: "replay", priorAttempts: 0 });
    expect(replayJobId("d_abc", 2)).toBe("d_abc-r2");
  });

  it("make the attempt-log record base of a job", () => {
    expect(recordBaseOf(fanoutJob)).toEqual({
      id: "d_abc",
      user_id: "u_1",
      listener_id: "wh_hook",
      listener_kind: "webhook",
      event_id: "1700000000000-3",
      emitter_id: "p_orders",
      event_name: "",
      payload: '{"n":1}',
      shared_payload: false,
      accepted_at_ms: 1234,
    });
  });

  it("refer to the event's stored payload for a job without one, and replay such a record by reference", () => {
    const { payload: _stored, ...byRef } = fanoutJob;
    const base = recordBaseOf(byRef);
    expect(base.payload).toBe("");
    expect(base.shared_payload).toBe(true);
    const record: DeliveryRecord = { ...base, payload_key: "k", status: "failed", attempts: [], created_at: 1, updated_at: 2, replays: 0 };
    expect(replayJob(record).payload).toBeUndefined();
  });
});

describe("prepareRequest (the prepare phase of an attempt)", () => {
  const secret = `whsec_${Buffer.alloc(24, 9).toString("base64")}`;
  const nowMs = 1_700_000_123_456;

  it("sets the Tributary and Standard Webhooks headers, numbered as planned, and signs a webhook delivery", () => {
    const req = prepareRequest(fanoutJob, { url: "http://example.test/hook", secret }, 3, nowMs);
    expect(req.url).toBe("http://example.test/hook");
    expect(req.body).toBe('{"n":1}');
    expect(req.headers).toMatchObject({
      "content-type": "application/json",
      "x-tributary-emitter-id": "p_orders",
      "x-tributary-event-id": "1700000000000-3",
      "x-tributary-event-name": "default",
      "x-tributary-attempt": "3",
      "x-tributary-delivery-id": "d_abc",
      "webhook-id": "d_abc",
      "webhook-timestamp": "1700000123",
    });
    const verifyAt = new Webhook(secret);
    // standardwebhooks checks the timestamp against the clock: verify as of the attempt's time.
    const realNow = Date.now;
    Date.now = () => nowMs;
    try {
      expect(verifyAt.verify(req.body, { ...req.headers })).toEqual({ n: 1 });
    } finally {
      Date.now = realNow;
    }
  });

  it("signs with the current and the previous secret during a rotation's overlap, each verifiable alone", () => {
    const previous = `whsec_${Buffer.alloc(32, 4).toString("base64")}`;
    const req = prepareRequest(fanoutJob, { url: "http://example.test/hook", secret, previousSecret: previous }, 1, nowMs);
    const signatures = String(req.headers["webhook-signature"]).split(" ");
    expect(signatures).toHaveLength(2);
    expect(signatures.every((s) => s.startsWith("v1,"))).toBe(true);
    const realNow = Date.now;
    Date.now = () => nowMs;
    try {
      expect(new Webhook(secret).verify(req.body, { ...req.headers })).toEqual({ n: 1 });
      expect(new Webhook(previous).verify(req.body, { ...req.headers })).toEqual({ n: 1 });
    } finally {
      Date.now = realNow;
    }
    // Without a previous secret (none, or its overlap ended): one signature.
    const single = prepareRequest(fanoutJob, { url: "http://example.test/hook", secret, previousSecret: null }, 1, nowMs);
    expect(String(single.headers["webhook-signature"]).split(" ")).toHaveLength(1);
  });

  it("adds a webhook's headers but leaves out those the API refuses now (stored before the rule)", () => {
    const headers = { "x-team": "blue", "transfer-encoding": "chunked", "user-agent": "mine/1", upgrade: "h2c" };
    const req = prepareRequest(fanoutJob, { url: "http://example.test/hook", secret, headers }, 1, nowMs);
    expect(req.headers["x-team"]).toBe("blue");
    expect(req.headers["user-agent"]).toBe("Tributary-Webhooks/1");
    expect(req.headers["transfer-encoding"]).toBeUndefined();
    expect(req.headers.upgrade).toBeUndefined();
  });

  it("names a channel as given, and leaves a workflow delivery unsigned", () => {
    const job = newDeliveryJob({ ...event, channel: "orders" }, "p_flow", "workflow", "d_def", JOB_STARTS.fanout);
    const req = prepareRequest(job, { url: "http://example.test/flow", secret: null }, 1, nowMs);
    expect(req.headers["x-tributary-event-name"]).toBe("orders");
    expect(req.headers["webhook-signature"]).toBeUndefined();
    expect(req.headers["webhook-id"]).toBe("d_def");
  });
});
