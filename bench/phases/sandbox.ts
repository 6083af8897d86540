/** (Issue 4) Sandbox overhead, in a child process (bench/runtime.ts), once the daemon is gone and the machine quiet. */
import type { Phase } from "../context.js";
import { sandboxPhase } from "../runtime.js";
import { fmt } from "../stats.js";

export const sandbox: Phase = {
  name: "sandbox",
  needs: ["alone"],
  async run({ settings: S, log }) {
    log(
      `sandbox run overhead: ${S.runtime.sandboxRuns} sequential runs of a trivial component (after ${S.runtime.sandboxWarmup} warm-up runs)`,
    );
    const x = await sandboxPhase(S.runtime.sandboxRuns, S.runtime.sandboxWarmup);
    log(`  p50 ${fmt(x.p50, 3)} ms, p99 ${fmt(x.p99, 3)} ms, mean ${fmt(x.mean, 3)} ms per run; failed runs ${JSON.stringify(x.errors)}`);
    log(
      `  CPU ${fmt(x.cpuUsPerRun)} µs per warm run (${fmt(x.isolateCpuUsPerRun ?? Number.NaN)} µs of it in the isolate); other processes used ${fmt(x.otherPct ?? Number.NaN, 0)} % of a core meanwhile`,
    );
    for (const [what, c] of [
      ["first run of a new source (warm user)", x.coldSource],
      ["first run of a new user", x.coldUser],
    ] as const) {
      if (c) log(`  ${what}: p50 ${fmt(c.p50, 3)} ms, p99 ${fmt(c.p99, 3)} ms, CPU ${fmt(c.cpuUsPerRun)} µs per run (${c.count} runs)`);
    }
    const m = x.memory;
    if (m) {
      log(
        `  memory: ${m.sources} live contexts of ${m.users} users: ${fmt(m.rssTotalMiB, 0)} MiB RSS (process ${fmt(m.rssMiB, 0)} MiB); ${fmt(m.rssPerIsolateMiB, 2)} MiB per isolate, ${fmt(m.rssPerContextKiB, 0)} KiB per context`,
      );
    }
    return { sandbox: x };
  },
};
