import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../../../src/observability/metrics.js";

/** `tributary_ready` (what the readiness alert reads) is the readiness check, asked at scrape time. */
describe("the tributary_ready gauge", () => {
  it("is 1 while the process is ready and 0 once it is not, at each scrape", async () => {
    const metrics = createMetrics(new Registry(), { defaultMetrics: false });
    let ready = true;
    metrics.observeReadiness(async () => ready);
    expect(await metrics.registry.metrics()).toMatch(/^tributary_ready 1$/m);
    ready = false;
    expect(await metrics.registry.metrics()).toMatch(/^tributary_ready 0$/m);
  });

  it("is 0 when the check fails, and the scrape still succeeds", async () => {
    const metrics = createMetrics(new Registry(), { defaultMetrics: false });
    metrics.observeReadiness(async () => {
      throw new Error("Redis is gone");
    });
    expect(await metrics.registry.metrics()).toMatch(/^tributary_ready 0$/m);
  });
});
