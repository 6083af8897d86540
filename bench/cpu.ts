import { readdirSync, readFileSync } from "node:fs";

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

/** The parent pid of each live process, from /proc. */
function parentPids(): Map<number, number> {
  const out = new Map<number, number>();
  let names: string[] = [];
  try {
    names = readdirSync("/proc");
  } catch {
    return out;
  }
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      out.set(Number(name), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}

/**
 * CPU time in ms of each named process and of its live child processes, by child pid (the
 * daemon's sandbox process is the daemon's cost). The measuring process (`bench`) counts alone:
 * its children are the deployment's processes, named on their own.
 */
function sample(pids: Record<string, number | undefined>): Map<string, Map<number, number>> {
  const parents = parentPids();
  const out = new Map<string, Map<number, number>>();
  for (const [name, pid] of Object.entries(pids)) {
    if (pid === undefined) continue;
    const own = cpuMsOf(pid);
    if (own === undefined) continue;
    const tree = new Map<number, number>([[pid, own]]);
    if (name !== "bench") {
      for (const [child, parent] of parents) {
        const ms = parent === pid ? cpuMsOf(child) : undefined;
        if (ms !== undefined) tree.set(child, ms);
      }
    }
    out.set(name, tree);
  }
  return out;
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
  const before = sample(pids);
  return () => {
    const wall = performance.now() - start;
    const after = sample(pids);
    const out: CpuShares = {};
    for (const [name, tree] of after) {
      const was = before.get(name);
      if (!was || wall <= 0) continue;
      // A child that started during the interval counts from zero; one that ended is lost.
      let ms = 0;
      for (const [pid, now] of tree) ms += now - (was.get(pid) ?? 0);
      out[name] = (100 * ms) / wall;
    }
    const machineAfter = machineBusyMs();
    if (machineBefore !== undefined && machineAfter !== undefined && wall > 0) {
      const ours = Object.values(out).reduce((x, y) => x + y, 0);
      out.other = Math.max(0, (100 * (machineAfter - machineBefore)) / wall - ours);
    }
    return { pct: out, wallMs: wall };
  };
}
