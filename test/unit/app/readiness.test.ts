import { describe, expect, it } from "vitest";
import { boundedReadiness } from "../../../src/app/readiness.js";

describe("boundedReadiness", () => {
  it("passes the probe's answer through", async () => {
    expect(await boundedReadiness(async () => true, 1000)()).toBe(true);
    expect(await boundedReadiness(async () => false, 1000)()).toBe(false);
  });

  it("counts a probe that throws as not ready", async () => {
    expect(
      await boundedReadiness(async () => {
        throw new Error("Redis is gone");
      }, 1000)(),
    ).toBe(false);
  });

  it("answers not ready once the deadline passes without an answer", async () => {
    const stalled = boundedReadiness(() => new Promise<boolean>(() => {}), 50);
    expect(await stalled()).toBe(false);
  });
});
