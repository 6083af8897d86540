/**
 * Sandbox run overhead, timed in-process (run with `node --no-node-snapshot --import tsx`, which
 * isolated-vm needs on Node 20+): compiles a trivial component once, then runs it `argv[2]` times
 * one after the other in a Sandbox configured like the daemon's defaults (64 MB, 10 s), after
 * `argv[3]` warm-up runs. Prints `RESULT <json>` on stdout and exits. Failed runs are counted by
 * error code (with the 1-based index of the first, warm-up included), not fatal.
 *
 * Besides the process's CPU per warm run it reports the isolate's own share (`isolateCpuUsPerRun`,
 * the guest's time in it) and the CPU the rest of the machine used meanwhile (`otherPct`, % of one
 * core): runs on a shared machine are only comparable at similar "other" load.
 *
 * Then the cold case (issue 12): `COLD_RUNS` (100) first runs of as many new sources of one user
 * whose isolate is already warm (a new context: prelude + module), and `COLD_RUNS / 4` first runs
 * of new users (a new isolate too). Each is timed on its own.
 *
 * Then memory (issue 12 item 7): in a fresh Sandbox, `MEM_USERS` (10) users each get one live
 * source context (so an isolate each), then `MEM_SOURCES` (1000) sources in all share them evenly;
 * the process's RSS is read before, after the isolates and after the contexts, each time after
 * V8's garbage collection of the host heap (`--expose-gc`, when given) and a short settle. The
 * isolates' own heap statistics (used heap, external memory) are summed too. `MEM_SOURCES=0`
 * skips it.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { compileComponent } from "../src/runtime/component/compile.js";
import { Sandbox } from "../src/runtime/sandbox/sandbox.js";
import { ROOT } from "./child.js";
import { cpuMeter } from "./cpu.js";
import { summarize } from "./stats.js";

const runs = Number(process.argv[2] ?? 2000);
const warmup = Number(process.argv[3] ?? 200);

const TRIVIAL = `module.exports = {
  name: "Bench trivial",
  version: "0.0.1",
  props: {},
  async run(event) { this.$emit(event); },
};`;

const compiledCode = await compileComponent(TRIVIAL, { allowedPackages: ["@pipedream/platform"], resolveDir: ROOT });
const sandbox = new Sandbox({ memoryMb: 64, timeoutMs: 10_000 });
let memory: Record<string, number> | undefined;
const event = { seq: 1, kind: "bench", msg: "hello from the bench", n: 42, ok: true };
/** Failed runs by error code: counted (and reported), not fatal, so a sandbox defect shows in the table. */
const errors: Record<string, number> = {};
const firstError: Record<string, number> = {};
let n = 0;
const runOnce = async (sourceId = "dc_bench", userId = "u_bench") => {
  const r = await sandbox.run({ compiledCode, userId, sourceId, method: "run", props: {}, db: {}, event });
  n++;
  const code = r.error ? r.error.code : r.emits.length !== 1 ? `EMITS_${r.emits.length}` : undefined;
  if (code) {
    errors[code] = (errors[code] ?? 0) + 1;
    firstError[code] ??= n;
  }
};

try {
  for (let i = 0; i < warmup; i++) await runOnce();
  const ms: number[] = [];
  // The isolate's own CPU time (the guest's share of a run) and the rest of the machine's load.
  type Isolates = { users: { isolates: Map<string, { isolate: { cpuTime: bigint } }> } };
  const isolate = (sandbox as unknown as Isolates).users.isolates.get("user:u_bench")?.isolate;
  const isolateCpu0 = isolate?.cpuTime ?? 0n;
  const meter = cpuMeter({ sandbox: process.pid });
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await runOnce();
    ms.push(performance.now() - t);
  }
  const wallMs = performance.now() - wall0;
  const cpu = process.cpuUsage(cpu0);
  const otherPct = meter().pct.other;
  const isolateCpuUsPerRun = isolate ? Number((isolate.cpuTime ?? 0n) - isolateCpu0) / 1000 / runs : undefined;
  const coldRuns = Number(process.env.COLD_RUNS ?? 100);
  const timed = async (n: number, ids: (i: number) => [string, string]) => {
    const out: number[] = [];
    const c0 = process.cpuUsage();
    for (let i = 0; i < n; i++) {
      const [sourceId, userId] = ids(i);
      const t = performance.now();
      await runOnce(sourceId, userId);
      out.push(performance.now() - t);
    }
    const c = process.cpuUsage(c0);
    return { ...summarize(out), cpuUsPerRun: (c.user + c.system) / n };
  };
  const coldSource = await timed(coldRuns, (i) => [`dc_cold_${i}`, "u_bench"]);
  const coldUser = await timed(Math.max(1, Math.floor(coldRuns / 4)), (i) => [`dc_coldu_${i}`, `u_cold_${i}`]);
  sandbox.close();
  const memSources = Number(process.env.MEM_SOURCES ?? 1000);
  if (memSources > 0) memory = await memoryPhase(memSources, Math.max(1, Number(process.env.MEM_USERS ?? 10)));
  process.stdout.write(
    `RESULT ${JSON.stringify({ ...summarize(ms), runs, warmup, wallMs, cpuUsPerRun: (cpu.user + cpu.system) / runs, isolateCpuUsPerRun, otherPct, errors, firstError, coldSource, coldUser, memory })}\n`,
  );
} finally {
  sandbox.close();
}

/** RSS after the host's GC (when exposed) and a short settle, in MiB. */
async function rssMiB(): Promise<number> {
  const gc = (globalThis as { gc?: () => void }).gc;
  for (let i = 0; i < 2; i++) {
    gc?.();
    await sleep(50);
  }
  return process.memoryUsage().rss / 2 ** 20;
}

/** Memory of `sources` live contexts of `users` users (an isolate each), in a Sandbox of its own. */
async function memoryPhase(sources: number, users: number): Promise<Record<string, number>> {
  const box = new Sandbox(
    { memoryMb: 64, timeoutMs: 10_000 },
    { maxIsolates: users, maxContexts: sources, maxContextsPerIsolate: Math.ceil(sources / users) },
  );
  try {
    const run = async (sourceId: string, userId: string) => {
      const r = await box.run({ compiledCode, userId, sourceId, method: "run", props: {}, db: {}, event });
      if (r.error || r.emits.length !== 1) throw new Error(`memory phase: run of ${sourceId} failed (${r.error?.code ?? r.emits.length})`);
    };
    const before = await rssMiB();
    for (let u = 0; u < users; u++) await run(`dc_mem_${u}_0`, `u_mem_${u}`);
    const withIsolates = await rssMiB();
    for (let i = users; i < sources; i++) await run(`dc_mem_${i % users}_${Math.floor(i / users)}`, `u_mem_${i % users}`);
    const withContexts = await rssMiB();
    if (box.contextCount !== sources) throw new Error(`memory phase: ${box.contextCount} contexts live, not ${sources}`);
    // The bench reads the isolates' heap statistics through the sandbox's private table.
    type Isolates = { users: { isolates: Map<string, { isolate: { getHeapStatisticsSync(): Record<string, number> } }> } };
    const isolates = [...(box as unknown as Isolates).users.isolates.values()];
    let heapUsed = 0;
    let external = 0;
    for (const ui of isolates) {
      const h = ui.isolate.getHeapStatisticsSync();
      heapUsed += h.used_heap_size ?? 0;
      external += h.externally_allocated_size ?? 0;
    }
    const mib = 2 ** 20;
    return {
      sources,
      users,
      rssBeforeMiB: before,
      rssMiB: withContexts,
      rssTotalMiB: withContexts - before,
      rssPerIsolateMiB: (withIsolates - before) / users,
      rssPerContextKiB: ((withContexts - withIsolates) * 1024) / (sources - users),
      isolateHeapUsedMiB: heapUsed / mib,
      isolateExternalMiB: external / mib,
      hostGc: typeof (globalThis as { gc?: unknown }).gc === "function" ? 1 : 0,
    };
  } finally {
    box.close();
  }
}
process.exit(0);
