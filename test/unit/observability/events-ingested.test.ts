import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../../../src/observability/metrics.js";

/**
 * `tributary_events_ingested_total` (observability/metrics.ts): counts taken per record are added
 * to the counter when it is read, each exactly once, under the channel's class.
 */
async function values(registry: Registry): Promise<Record<string, number>> {
  const metric = await registry.getSingleMetric("tributary_events_ingested_total")?.get();
  return Object.fromEntries((metric?.values ?? []).map((v) => [`${v.labels.emitter_kind} ${v.labels.channel}`, v.value]));
}

describe("tributary_events_ingested_total", () => {
  it("shows every count by kind and channel class when read, and counts each once however often it is read", async () => {
    const registry = new Registry();
    const metrics = createMetrics(registry, { defaultMetrics: false });
    metrics.countIngested("workflow", "", 2);
    metrics.countIngested("workflow", "default", 1);
    metrics.countIngested("workflow", "orders", 4);
    metrics.countIngested("source", "$errors", 3);
    expect(await values(registry)).toEqual({ "workflow default": 3, "workflow custom": 4, "source $errors": 3 });
    expect(await values(registry)).toEqual({ "workflow default": 3, "workflow custom": 4, "source $errors": 3 });
    metrics.countIngested("workflow", "more", 5);
    metrics.countIngested("webhook", "$logs", 1);
    expect(await values(registry)).toEqual({ "workflow default": 3, "workflow custom": 9, "source $errors": 3, "webhook $logs": 1 });
    const text = await registry.metrics();
    expect(text).toContain('tributary_events_ingested_total{emitter_kind="workflow",channel="custom"} 9');
  });
});
