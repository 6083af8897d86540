/**
 * Sandbox run overhead, timed in-process (run with `node --no-node-snapshot --import tsx`, which
 * isolated-vm needs on Node 20+): compiles a trivial component once, then runs it `argv[2]` times
 * one after the other in a Sandbox configured like the daemon's defaults (64 MB, 10 s), after
 * `argv[3]` warm-up runs. Prints `RESULT <json>` on stdout and exits. Failed runs are counted by
 * error code (with the 1-based index of the first, warm-up included), not fatal.
 *
 * Then the cold case (issue 12): `COLD_RUNS` (100) first runs of as many new sources of one user
 * whose isolate is already warm (a new context: prelude + module), and `COLD_RUNS / 4` first runs
 * of new users (a new isolate too). Each is timed on its own.
 */
import { performance } from "node:perf_hooks";
import { compileComponent } from "../src/runtime/component/compile.js";
import { Sandbox } from "../src/runtime/sandbox/sandbox.js";
import { ROOT } from "./child.js";
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
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await runOnce();
    ms.push(performance.now() - t);
  }
  const wallMs = performance.now() - wall0;
  const cpu = process.cpuUsage(cpu0);
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
  process.stdout.write(
    `RESULT ${JSON.stringify({ ...summarize(ms), runs, warmup, wallMs, cpuUsPerRun: (cpu.user + cpu.system) / runs, errors, firstError, coldSource, coldUser })}\n`,
  );
} finally {
  sandbox.close();
}
process.exit(0);
