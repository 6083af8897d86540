import { randomBytes } from "node:crypto";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { Attempter, uncachedListeners } from "../../../src/delivery/attempt.js";
import { newDeliveryJob } from "../../../src/delivery/jobs.js";
import { createSender } from "../../../src/delivery/sender.js";
import { JOB_STARTS } from "../../../src/domain/delivery-plan.js";
import { createGuardedAgent } from "../../../src/net/guarded-agent.js";
import { HealthEvents } from "../../../src/events/health.js";
import { Ingest } from "../../../src/events/ingest.js";
import { parseOutboxEntry } from "../../../src/events/outbox.js";
import { createMetrics, type Metrics } from "../../../src/observability/metrics.js";
import { EventStore } from "../../../src/store/events.js";
import { WebhookStore } from "../../../src/store/webhooks.js";
import { WorkflowStore } from "../../../src/store/workflows.js";
import { connectRedis } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";
import { installPipeline, logger, newUserId, newWebhook, outboxEntries, w } from "../../helpers/pipeline.js";

/**
 * events/health.ts against real Redis: the circuit breaker's report (`onCircuitChange`, called here
 * directly as the Attempter will), the queue giving up (`Attempter.giveUp`), a deleted webhook,
 * and Redis failing under a report (logged and counted, never thrown).
 */

installPipeline();

/** Ingest needs a workflow registry only for workflow emits; health events never use it. */
const noWorkflows = { recordKey: () => "unused", ensure: async () => {} };

function healthOn(events: EventStore): { health: HealthEvents; metrics: Metrics } {
  const metrics = createMetrics(new Registry(), { defaultMetrics: false });
  const ingest = new Ingest(events, noWorkflows, metrics, Date.now, (n) => randomBytes(n));
  const health = new HealthEvents({ ingest, webhookKey: (userId, id) => w.keys.webhook(userId, id), logger, metrics });
  return { health, metrics };
}

async function counted(metrics: Metrics): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await metrics.healthEvents.get()).values) out[`${v.labels.event_name} ${v.labels.outcome}`] = v.value;
  return out;
}

const summaries = async (userId: string, webhookId: string, channel: string) =>
  (await w.events.summaries(userId, webhookId, channel, { limit: 100, expand: true })).data;

describe("HealthEvents", () => {
  it("records a circuit opening as $webhook_disabled and its closing as $webhook_recovered, and routes them to wh_* subscribers", async () => {
    const userId = newUserId();
    const hook = await newWebhook(userId, "/circuit");
    const monitor = await newWebhook(userId, "/monitor");
    await w.subscriptions.create(userId, "wh_*", monitor.id, "$webhook_disabled");
    const { health, metrics } = healthOn(w.events);

    health.onCircuitChange(userId, hook.id, "opened");
    health.onCircuitChange(userId, hook.id, "closed");

    const waitForOne = (channel: string) =>
      waitFor(
        async () => {
          const got = await summaries(userId, hook.id, channel);
          return got.length > 0 ? got : undefined;
        },
        { what: `a ${channel} event` },
      );
    const [disabled] = await waitForOne("$webhook_disabled");
    const [recovered] = await waitForOne("$webhook_recovered");
    expect(disabled!.event).toMatchObject({ webhook_id: hook.id, reason: "circuit" });
    expect(disabled!.event).toHaveProperty("message", expect.stringMatching(/circuit opened/));
    expect(recovered!.event).toMatchObject({ webhook_id: hook.id, reason: "circuit" });
    expect(recovered!.metadata).toMatchObject({ emitter_id: hook.id, name: "$webhook_recovered" });

    // Only the subscribed channel reaches the outbox, as a webhook's event.
    const entries = (await outboxEntries()).map(([id, fields]) => parseOutboxEntry(id, fields));
    expect(entries.map((e) => [e?.emitterId, e?.emitterKind, e?.channel, e?.eventId])).toEqual([
      [hook.id, "webhook", "$webhook_disabled", disabled!.id],
    ]);
    expect(await counted(metrics)).toEqual({ "$webhook_disabled recorded": 1, "$webhook_recovered recorded": 1 });
  });

  it("reports $delivery_failed when the queue gives up on a delivery, but not on a delivered one nor on a health event's", async () => {
    const userId = newUserId();
    const hook = await newWebhook(userId, "/given-up");
    const { health, metrics } = healthOn(w.events);
    const agent = createGuardedAgent({ allowPrivate: true });
    const sender = createSender({ agent, timeoutMs: 1000 });
    w.closers.push(async () => {
      await sender.close();
      await agent.close();
    });
    const webhooks = new WebhookStore(w.ctx);
    const attempter = new Attempter({
      sender,
      attemptLog: w.attemptLog,
      listeners: uncachedListeners(webhooks, new WorkflowStore(w.ctx)),
      webhooks,
      scheduleMs: [100],
      health,
      logger,
      metrics,
    });
    const job = (emitterId: string, eventId: string, deliveryId: string) =>
      newDeliveryJob(
        { userId, emitterId, channel: "", eventId, payload: "{}", acceptedAtMs: Date.now() },
        hook.id,
        "webhook",
        deliveryId,
        JOB_STARTS.fanout,
      );

    await attempter.giveUp(job("p_given_up", "1-1", "d_givenup00000000001"));
    // A health event's delivery (emitter wh_...) that fails reports nothing: no loops.
    await attempter.giveUp(job(hook.id, "1-2", "d_givenup00000000002"));
    // A delivery already delivered stays delivered: nothing failed.
    const delivered = job("p_given_up", "1-3", "d_givenup00000000003");
    await w.attemptLog.upsert(
      {
        id: delivered.deliveryId,
        user_id: userId,
        listener_id: hook.id,
        listener_kind: "webhook",
        event_id: "1-3",
        emitter_id: "p_given_up",
        event_name: "",
        payload: "{}",
        accepted_at_ms: delivered.acceptedAtMs,
      },
      { status: "delivered", attempt: { at: new Date().toISOString(), status_code: 200, duration_ms: 1, error: null } },
    );
    await attempter.giveUp(delivered);

    const got = await summaries(userId, hook.id, "$delivery_failed");
    expect(got.map((s) => s.event)).toEqual([
      expect.objectContaining({
        webhook_id: hook.id,
        id: "d_givenup00000000001",
        emitter_id: "p_given_up",
        status: "failed",
        attempts: [],
      }),
    ]);
    expect(got[0]!.metadata).toMatchObject({
      id: "d_givenup00000000001",
      summary: "delivery d_givenup00000000001 failed after 0 attempts",
    });
    expect(await counted(metrics)).toEqual({ "$delivery_failed recorded": 1 });
  });

  it("records nothing for a deleted webhook (counted as skipped)", async () => {
    const userId = newUserId();
    const hook = await newWebhook(userId, "/deleted");
    await new WebhookStore(w.ctx).delete(userId, hook.id);
    const { health, metrics } = healthOn(w.events);
    await health.webhookDisabled(userId, hook.id, "circuit", "circuit opened");
    expect(await summaries(userId, hook.id, "$webhook_disabled")).toEqual([]);
    expect(await w.events.channels(userId, hook.id)).toEqual([]);
    expect(await counted(metrics)).toEqual({ "$webhook_disabled skipped": 1 });
  });

  it("never rejects when Redis fails under a report: the failure is counted", async () => {
    const broken = connectRedis();
    const events = new EventStore(broken, w.keys);
    broken.disconnect();
    const { health, metrics } = healthOn(events);
    const userId = newUserId();
    await expect(health.webhookRecovered(userId, "wh_0000000000000000", "api", "reactivated")).resolves.toBeUndefined();
    expect(() => health.onCircuitChange(userId, "wh_0000000000000000", "opened")).not.toThrow();
    await waitFor(async () => (await counted(metrics))["$webhook_disabled failed"] === 1, { what: "the circuit report to fail" });
    expect(await counted(metrics)).toEqual({ "$webhook_recovered failed": 1, "$webhook_disabled failed": 1 });
  });
});
