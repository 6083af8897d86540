import { describe, expect, it } from "vitest";
import { boundedReadiness, sharedCheck } from "../../../src/app/readiness.js";

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

describe("sharedCheck", () => {
  it("runs one check for callers that ask while it runs", async () => {
    let runs = 0;
    let finish: (ok: boolean) => void = () => {};
    const check = sharedCheck(() => {
      runs++;
      return new Promise<boolean>((resolve) => {
        finish = resolve;
      });
    });
    const answers = [check(), check(), check()];
    finish(true);
    expect(await Promise.all(answers)).toEqual([true, true, true]);
    expect(runs).toBe(1);
  });

  it("checks again for a caller that asks after the answer came (no stale ready)", async () => {
    let runs = 0;
    let healthy = true;
    const check = sharedCheck(async () => {
      runs++;
      return healthy;
    });
    expect(await check()).toBe(true);
    healthy = false;
    expect(await check()).toBe(false);
    expect(runs).toBe(2);
  });

  it("does not keep a failed check's rejection", async () => {
    let fail = true;
    const check = sharedCheck(async () => {
      if (fail) throw new Error("down");
      return true;
    });
    await expect(check()).rejects.toThrow("down");
    fail = false;
    expect(await check()).toBe(true);
  });
});
