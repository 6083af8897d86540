import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { Attempter, uncachedListeners } from "../../../src/delivery/attempt.js";
import { CircuitBreaker } from "../../../src/delivery/circuit.js";
import { newDeliveryJob } from "../../../src/delivery/jobs.js";
import { createSender } from "../../../src/delivery/sender.js";
import { PROBE_HEAD_START_MS } from "../../../src/domain/circuit.js";
import { JOB_STARTS, NOT_QUEUED } from "../../../src/domain/delivery-plan.js";
import { createGuardedAgent } from "../../../src/net/guarded-agent.js";
import { createMetrics } from "../../../src/observability/metrics.js";
import { CircuitStore } from "../../../src/store/circuit.js";
import { CircuitHints } from "../../../src/store/circuit-hints.js";
import { WebhookStore } from "../../../src/store/webhooks.js";
import { WorkflowStore } from "../../../src/store/workflows.js";
import { answers, installPipeline, logger, newUserId, newWebhook, rx, w } from "../../helpers/pipeline.js";
import { connectRedis } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * Two Attempters, each with its own Redis connection, sender and metrics, as two worker processes
 * would have them, against one webhook: they share its circuit, and only one of them probes.
 */

installPipeline();

interface Process {
  attempter: Attempter;
  changes: string[];
  registry: Registry;
  /** Calls that reached the circuit store (Redis). */
  calls: { admit: number; record: number };
  hints?: CircuitHints;
}

async function workerProcess(withHints = false): Promise<Process> {
  const redis = connectRedis();
  const agent = createGuardedAgent({ allowPrivate: true });
  const sender = createSender({ agent, timeoutMs: 5_000 });
  const real = new CircuitStore(redis, w.keys, { threshold: 2, cooldownMs: 500, maxCooldownMs: 60_000 });
  const calls = { admit: 0, record: 0 };
  const store = {
    admit: (...a: Parameters<CircuitStore["admit"]>) => {
      calls.admit++;
      return real.admit(...a);
    },
    record: (...a: Parameters<CircuitStore["record"]>) => {
      calls.record++;
      return real.record(...a);
    },
    discard: (...a: Parameters<CircuitStore["discard"]>) => real.discard(...a),
  };
  let hints: CircuitHints | undefined;
  if (withHints) {
    hints = new CircuitHints({ subscriber: connectRedis(), channel: w.keys.circuitChanges(), logger });
    await hints.start();
    const started = hints;
    w.closers.push(() => started.stop());
  }
  const breaker = new CircuitBreaker({ store, jobs: w.deliveryQueue, deliveryTimeoutMs: 5_000, hints, logger });
  const webhooks = new WebhookStore({ ...w.ctx, redis });
  const changes: string[] = [];
  const registry = new Registry();
  w.closers.push(async () => {
    breaker.close();
    await sender.close();
    await agent.close();
    redis.disconnect();
  });
  const attempter = new Attempter({
    sender,
    attemptLog: w.attemptLog,
    listeners: uncachedListeners(webhooks, new WorkflowStore({ ...w.ctx, redis })),
    webhooks,
    scheduleMs: [100, 200, 400],
    circuit: breaker,
    health: {
      deliveryFailed: async () => {},
      webhookDeactivated: async () => {},
      onCircuitChange: (_userId, webhookId, change) => changes.push(`${webhookId} ${change}`),
    },
    logger,
    metrics: createMetrics(registry, { defaultMetrics: false }),
  });
  return { attempter, changes, registry, calls, hints };
}

async function transitions(p: Process, to: string): Promise<number> {
  const values = (await p.registry.getSingleMetric("tributary_circuit_transitions_total")?.get())?.values ?? [];
  return values.find((v) => v.labels.to === to)?.value ?? 0;
}

describe("a circuit shared by two worker processes", () => {
  it("opens on their failures together, turns both away during the cool-down, and lets only one of them probe", async () => {
    const path = `/shared-${randomBytes(4).toString("hex")}`;
    let down = true;
    answers.set(path, async () => {
      if (down) return { status: 500 };
      await sleep(2000);
      return { status: 200 };
    });
    const userId = newUserId();
    const hook = await newWebhook(userId, path);
    let n = 0;
    const job = () => {
      const eventId = `${Date.now()}-${++n}`;
      const event = { userId, emitterId: "p_shared", channel: "", eventId, payload: "{}", acceptedAtMs: Date.now() };
      return newDeliveryJob(event, hook.id, "webhook", `d_shared_${n}_${randomBytes(3).toString("hex")}`, JOB_STARTS.fanout);
    };
    const [one, two] = [await workerProcess(), await workerProcess()];

    // One failure in each process: two in a row for the circuit, which opens (threshold 2).
    expect(await one.attempter.attempt(job(), NOT_QUEUED)).toMatchObject({ kind: "retry" });
    expect(await two.attempter.attempt(job(), NOT_QUEUED)).toMatchObject({ kind: "retry" });
    expect(two.changes).toEqual([`${hook.id} opened`]);
    expect(one.changes).toEqual([]);

    // Both are turned away during the cool-down, without an attempt: the first to make the probe
    // when it is due, the other for the probe's head start longer (plus up to a second of spread).
    const openedAt = Date.now();
    const waits: number[] = [];
    for (const p of [one, two]) {
      const turned = await p.attempter.attempt(job(), NOT_QUEUED);
      expect(turned).toMatchObject({ kind: "circuit_open" });
      waits.push((turned as { delayMs: number }).delayMs);
    }
    expect(waits[0]).toBeLessThanOrEqual(500);
    expect(waits[1]).toBeGreaterThan(waits[0] as number);
    expect(waits[1]).toBeLessThanOrEqual(500 + PROBE_HEAD_START_MS + 1000);
    expect(rx.to(path)).toHaveLength(2);

    // After it, six attempts at once from both: one probe (answered after 2 s), five turned away.
    down = false;
    await waitFor(() => Date.now() >= openedAt + 600, { what: "the cool-down to pass" });
    const outcomes = await Promise.all([one, two, one, two, one, two].map((p) => p.attempter.attempt(job(), NOT_QUEUED)));
    expect(outcomes.filter((o) => o?.kind === "delivered")).toHaveLength(1);
    expect(outcomes.filter((o) => o?.kind === "circuit_open")).toHaveLength(5);
    expect(rx.to(path)).toHaveLength(3);
    expect((await transitions(one, "half_open")) + (await transitions(two, "half_open"))).toBe(1);

    // The probe closed it: one "closed", from the process that probed; attempts go again.
    expect([...one.changes, ...two.changes].sort()).toEqual([`${hook.id} closed`, `${hook.id} opened`]);
    expect((await transitions(one, "closed")) + (await transitions(two, "closed"))).toBe(1);
    expect(await one.attempter.attempt(job(), NOT_QUEUED)).toEqual({ kind: "delivered" });
  });

  it("skips Redis for a circuit a process knows clean, until another process's failure is published", async () => {
    const path = `/hinted-${randomBytes(4).toString("hex")}`;
    let down = false;
    answers.set(path, () => ({ status: down ? 500 : 200 }));
    const userId = newUserId();
    const hook = await newWebhook(userId, path);
    let n = 0;
    const job = () => {
      const eventId = `${Date.now()}-${++n}`;
      const event = { userId, emitterId: "p_hinted", channel: "", eventId, payload: "{}", acceptedAtMs: Date.now() };
      return newDeliveryJob(event, hook.id, "webhook", `d_hinted_${n}_${randomBytes(3).toString("hex")}`, JOB_STARTS.fanout);
    };
    const [one, two] = [await workerProcess(true), await workerProcess(true)];

    // The first attempt learns the circuit is clean; after it, successes cost no circuit call.
    expect(await one.attempter.attempt(job(), NOT_QUEUED)).toEqual({ kind: "delivered" });
    expect(one.calls).toEqual({ admit: 1, record: 0 });
    for (let i = 0; i < 5; i++) expect(await one.attempter.attempt(job(), NOT_QUEUED)).toEqual({ kind: "delivered" });
    expect(one.calls).toEqual({ admit: 1, record: 0 });
    expect(one.hints?.isClean(userId, hook.id)).toBe(true);

    // The other process's failures open the circuit; the first one is published, and this process
    // goes to Redis again: it is turned away, without an attempt.
    down = true;
    expect(await two.attempter.attempt(job(), NOT_QUEUED)).toMatchObject({ kind: "retry" });
    expect(await two.attempter.attempt(job(), NOT_QUEUED)).toMatchObject({ kind: "retry" });
    expect(two.changes).toEqual([`${hook.id} opened`]);
    await waitFor(() => one.hints?.isClean(userId, hook.id) === false, { what: "the hint to be dropped" });
    const before = rx.to(path).length;
    expect(await one.attempter.attempt(job(), NOT_QUEUED)).toMatchObject({ kind: "circuit_open" });
    expect(one.calls.admit).toBe(2);
    expect(rx.to(path)).toHaveLength(before);
  });
});
