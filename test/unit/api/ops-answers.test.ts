import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { isOpsPath, opsAnswer } from "../../../src/api/ops-answers.js";

describe("opsAnswer", () => {
  const registry = new Registry();

  it("answers /readyz 200 or 503 after the readiness check", async () => {
    expect(await opsAnswer("/readyz", { registry, ready: async () => true })).toMatchObject({ status: 200, body: { status: "ready" } });
    expect(await opsAnswer("/readyz", { registry, ready: async () => false })).toMatchObject({
      status: 503,
      body: { code: "not_ready" },
    });
  });

  it("answers /metrics with the registry's text and content type", async () => {
    const answer = await opsAnswer("/metrics", { registry, ready: async () => true });
    expect(answer.contentType).toBe(registry.contentType);
    expect(typeof answer.body).toBe("string");
  });

  it("knows exactly the three ops paths", () => {
    expect(["/healthz", "/readyz", "/metrics", "/metrics/", "/v1/healthz"].map(isOpsPath)).toEqual([true, true, true, false, false]);
  });
});
