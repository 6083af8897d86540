import { afterAll, describe, expect, it } from "vitest";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";

/**
 * The time limit of runs in progress at once (Sandbox: one watchdog timer for all of them, armed for
 * the earliest deadline): each run ends at its own deadline, never at an earlier run's, and runs
 * that finish in between change nothing.
 */

const TIMEOUT_MS = 600;
const sandbox = new Sandbox({ memoryMb: 64, timeoutMs: TIMEOUT_MS });
afterAll(() => sandbox.close());

const compile = (body: string) =>
  compileComponent(`module.exports = { name: "Deadlines", async run() { ${body} } };`, { allowedPackages: [] });

describe("time limits of runs in progress at once", () => {
  it("ends each waiting run at its own deadline, whatever runs started or ended before it", async () => {
    const forever = await compile(`this.$emit("started"); await new Promise(() => {});`);
    const quick = await compile(`this.$emit("quick");`);
    const first = sandbox.run({ compiledCode: forever, userId: "u_first", sourceId: "dc_first", method: "run", props: {}, db: {} });
    await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS / 2));
    // A run that starts and ends while the first waits leaves the first's deadline alone.
    const between = await sandbox.run({ compiledCode: quick, userId: "u_quick", sourceId: "dc_quick", method: "run", props: {}, db: {} });
    expect(between.error).toBeUndefined();
    expect(between.emits.map((e) => e.event)).toEqual(["quick"]);
    const second = sandbox.run({ compiledCode: forever, userId: "u_second", sourceId: "dc_second", method: "run", props: {}, db: {} });
    const [a, b] = await Promise.all([first, second]);
    for (const r of [a, b]) {
      expect(r.error?.code).toBe("TIMEOUT");
      // What the run emitted before the limit is kept.
      expect(r.emits.map((e) => e.event)).toEqual(["started"]);
      // Never ended before its own deadline (the second started half a limit after the first).
      expect(r.durationMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
    }
    // After both, a new run gets the whole limit again.
    const third = await sandbox.run({ compiledCode: forever, userId: "u_first", sourceId: "dc_third", method: "run", props: {}, db: {} });
    expect(third.error?.code).toBe("TIMEOUT");
    expect(third.durationMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
  }, 30_000);
});
