import { afterAll, afterEach, describe, expect, it } from "vitest";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";
import { killAll, spawnScript } from "../../../helpers/process.js";

/**
 * Guest timers against code that fires them as fast as it can. Each case runs in a child process
 * (test/helpers/sandbox-child.ts): ten 1 ms intervals kept alive for about 9 s used to kill the
 * whole process with SIGSEGV in isolated-vm's timer thread (each firing armed its own isolated-vm
 * timeout, all due at the run's deadline), and a crash must show as the child's exit signal, not
 * take vitest down.
 */

afterEach(killAll);

const never = "await new Promise(() => {});";
const component = (body: string) => `module.exports = { name: "Timers", async run() { ${body} } };`;

interface ChildReport {
  verdict: { code: string; msg: string } | null;
  emits: unknown[];
  after: unknown[];
}

/** Runs `code` in a fresh process with a 10 s time limit; the process must exit normally. */
async function runInChild(code: string): Promise<ChildReport> {
  const child = spawnScript("sandbox-child", "test/helpers/sandbox-child.ts", { COMPONENT_CODE: code, SANDBOX_TIMEOUT_MS: "10000" });
  const exit = await child.exited;
  expect(exit, `the child died:\n${child.logs()}`).toEqual({ code: 0, signal: null });
  const line = child
    .logs()
    .split("\n")
    .find((l) => l.includes('{"verdict"'));
  if (!line) throw new Error(`no report from the child:\n${child.logs()}`);
  return JSON.parse(line.slice(line.indexOf("{"))) as ChildReport;
}

describe("guest timers in a child process", () => {
  it("ends a run with ten 1 ms intervals with a clear verdict, and the process survives", async () => {
    const r = await runInChild(component(`for (let i = 0; i < 10; i++) setInterval(() => {}, 1); ${never}`));
    // TIMER_LIMIT unless a starved CPU lets the time limit come first.
    expect(["TIMER_LIMIT", "TIMEOUT"]).toContain(r.verdict?.code);
    if (r.verdict?.code === "TIMER_LIMIT") expect(r.verdict.msg).toMatch(/more than 10000 timer callbacks/);
    expect(r.after).toEqual(["still serving"]);
  }, 60_000);

  it("fires a thousand setTimeout(0) callbacks and finishes normally", async () => {
    const r = await runInChild(
      component(`let n = 0;
      await new Promise((resolve) => { for (let i = 0; i < 1000; i++) setTimeout(() => { if (++n === 1000) resolve(); }, 0); });
      this.$emit(n);`),
    );
    expect(r.verdict).toBeNull();
    expect(r.emits).toEqual([1000]);
    expect(r.after).toEqual(["still serving"]);
  }, 60_000);

  it("ends a run whose intervals start intervals with a clear verdict", async () => {
    const r = await runInChild(component(`setInterval(() => { setInterval(() => {}, 1); }, 1); ${never}`));
    expect(r.verdict).not.toBeNull();
    expect(r.verdict?.msg).toMatch(/pending timers per run|timer callbacks|time limit/);
    expect(r.after).toEqual(["still serving"]);
  }, 60_000);
});

describe("guest timers", () => {
  const sandbox = new Sandbox({ memoryMb: 32, timeoutMs: 5_000, maxTimerFiringsPerRun: 50 });
  afterAll(() => sandbox.close());
  const run = async (body: string) =>
    sandbox.run({
      compiledCode: await compileComponent(component(body), { allowedPackages: [] }),
      sourceId: "dc_timers",
      method: "run",
      props: {},
      db: {},
    });

  it("fires timers in due order, intervals repeatedly, and skips cleared ones", async () => {
    const r = await run(`const seen = [];
      setTimeout(() => seen.push("b30"), 30);
      setTimeout(() => seen.push("a10"), 10);
      const cleared = setTimeout(() => seen.push("cleared"), 5);
      clearTimeout(cleared);
      setImmediate(() => seen.push("immediate"));
      let n = 0;
      const iv = setInterval(() => { seen.push("iv" + ++n); if (n === 3) clearInterval(iv); }, 2);
      await new Promise((resolve) => setTimeout(resolve, 60));
      this.$emit(seen.filter((s) => !s.startsWith("iv")));
      this.$emit(seen.filter((s) => s.startsWith("iv")));`);
    expect(r.error).toBeUndefined();
    expect(r.emits.map((e) => e.event)).toEqual([
      ["immediate", "a10", "b30"],
      ["iv1", "iv2", "iv3"],
    ]);
  });

  it("runs setImmediate callbacks before timers that came due meanwhile, however late the tick", async () => {
    // The run holds the thread for 30 ms between the two calls, as a loaded machine may: the 10 ms
    // timer is long due when the first tick comes, and the immediate still goes first.
    const r = await run(`const seen = [];
      setTimeout(() => seen.push("a10"), 10);
      const t = Date.now();
      while (Date.now() - t < 30) {}
      setImmediate(() => seen.push("immediate"));
      await new Promise((resolve) => setTimeout(resolve, 50));
      this.$emit(seen);`);
    expect(r.error).toBeUndefined();
    expect(r.emits.map((e) => e.event)).toEqual([["immediate", "a10"]]);
  });

  it("runs the promise callbacks of one timer before the next due timer", async () => {
    const r = await run(`const seen = [];
      setTimeout(() => { Promise.resolve().then(() => seen.push("then of first")); seen.push("first"); }, 5);
      setTimeout(() => seen.push("second"), 5);
      await new Promise((resolve) => setTimeout(resolve, 30));
      this.$emit(seen);`);
    expect(r.emits[0]?.event).toEqual(["first", "then of first", "second"]);
  });

  it("ends the run with TIMER_LIMIT past the firings allowed per run", async () => {
    const r = await run(`setInterval(() => {}, 1); ${never}`);
    expect(r.error?.code).toBe("TIMER_LIMIT");
    expect(r.error?.msg).toMatch(/more than 50 timer callbacks/);
  });

  it("fails a run whose timer callback throws", async () => {
    const r = await run(`setTimeout(() => { throw new RangeError("late failure"); }, 1); ${never}`);
    expect(r.error?.code).toBe("RangeError");
    expect(r.error?.msg).toBe("late failure");
  });
});
