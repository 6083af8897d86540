import { describe, expect, it } from "vitest";
import { RetryLog } from "../../../src/observability/retry-log.js";
import { collectingLogger } from "../../helpers/log-lines.js";

/** The lines reach the collecting sink within the turn after each call: wait for it. */
const flushed = () => new Promise((r) => setImmediate(r));

describe("RetryLog", () => {
  it("logs the first failure of a streak, then one reminder per interval with the count, then the recovery", async () => {
    const { logger, lines } = collectingLogger();
    const clock = { ms: 1_000 };
    const log = new RetryLog(logger, "loop error; retrying", { level: "error", everyMs: 30_000, now: () => clock.ms });
    // Five failures a second for 80 s: 400 failures, reminders at 30 s and 60 s.
    for (let i = 0; i < 400; i++) {
      log.failed(new Error("ECONNREFUSED"));
      clock.ms += 200;
    }
    log.succeeded();
    await flushed();
    const messages = lines.map((l) => l.msg);
    expect(messages).toEqual([
      "loop error; retrying",
      "loop error; retrying (still failing)",
      "loop error; retrying (still failing)",
      "loop error; retrying: recovered",
    ]);
    expect(lines[0]?.level).toBe(50); // error
    expect(lines[0]?.err).toMatchObject({ message: "ECONNREFUSED" });
    // Each reminder counts the failures since the line before it.
    expect(lines[1]).toMatchObject({ failures: 150, failingForMs: 30_000 });
    expect(lines[2]).toMatchObject({ failures: 150, failingForMs: 60_000 });
    expect(lines[3]).toMatchObject({ level: 30, failures: 400, failedForMs: 80_000 });
    expect(log.streak()).toBe(0);
  });

  it("says nothing while the loop works, and starts a new streak after a recovery", async () => {
    const { logger, lines } = collectingLogger();
    const log = new RetryLog(logger, "tick failed", { now: () => 0 });
    log.succeeded();
    log.failed(new Error("first"));
    log.failed(new Error("second"));
    log.succeeded();
    log.succeeded();
    log.failed(new Error("third"));
    await flushed();
    expect(lines.map((l) => [l.msg, l.level])).toEqual([
      ["tick failed", 40],
      ["tick failed: recovered", 30],
      ["tick failed", 40],
    ]);
    expect(lines.map((l) => (l.err as { message?: string } | undefined)?.message)).toEqual(["first", undefined, "third"]);
  });
});
