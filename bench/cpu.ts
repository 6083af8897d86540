import { readFileSync } from "node:fs";

/** CPU time of a process in ms (user + system), from /proc; undefined when it is gone. */
export function cpuMsOf(pid: number): number | undefined {
  if (pid === process.pid) {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ticks = Number(rest[11]) + Number(rest[12]);
    return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
  } catch {
    return undefined;
  }
}

/** CPU time of the whole machine in ms (every core, busy states only). */
function machineBusyMs(): number | undefined {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal ...
    const busy = (f[0] ?? 0) + (f[1] ?? 0) + (f[2] ?? 0) + (f[5] ?? 0) + (f[6] ?? 0) + (f[7] ?? 0);
    return (busy * 1000) / 100;
  } catch {
    return undefined;
  }
}

/** CPU use per process over an interval, in % of one core; `other` is everything else on the machine. */
export type CpuShares = Record<string, number>;

/** Starts measuring; the returned function reports each process's share since the start. */
export function cpuMeter(pids: Record<string, number | undefined>): () => { pct: CpuShares; wallMs: number } {
  const start = performance.now();
  const machineBefore = machineBusyMs();
  const before = new Map<string, number>();
  for (const [name, pid] of Object.entries(pids)) {
    const v = pid === undefined ? undefined : cpuMsOf(pid);
    if (v !== undefined) before.set(name, v);
  }
  return () => {
    const wall = performance.now() - start;
    const out: CpuShares = {};
    for (const [name, pid] of Object.entries(pids)) {
      const b = before.get(name);
      const a = pid === undefined ? undefined : cpuMsOf(pid);
      if (a !== undefined && b !== undefined && wall > 0) out[name] = (100 * (a - b)) / wall;
    }
    const machineAfter = machineBusyMs();
    if (machineBefore !== undefined && machineAfter !== undefined && wall > 0) {
      const ours = Object.values(out).reduce((x, y) => x + y, 0);
      out.other = Math.max(0, (100 * (machineAfter - machineBefore)) / wall - ours);
    }
    return { pct: out, wallMs: wall };
  };
}
