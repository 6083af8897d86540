import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

/**
 * What the embedded-Redis lock needs to know about another process on this host, read from
 * /proc on Linux and from `ps` elsewhere. Every function answers "unknown" (undefined) rather than
 * guess when neither is available.
 */

interface ProcStat {
  /** One letter: R, S, D, Z (zombie), T (stopped)… */
  readonly state: string;
  /** Clock ticks since boot at which the process started: with the pid, it names one process. */
  readonly startTime: string;
}

function procStat(pid: number): ProcStat | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) is in parentheses and may itself hold spaces or parentheses.
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
    const state = fields[0];
    const startTime = fields[19];
    return state && startTime ? { state, startTime } : undefined;
  } catch {
    return undefined;
  }
}

/** True when `pid` names a running process (a zombie is not running; it only awaits its parent). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: it exists but belongs to another user.
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  return procStat(pid)?.state !== "Z";
}

/** When `pid` started (Linux only): a pid reused by a later process has another start time. */
export function processStartTime(pid: number): string | undefined {
  return procStat(pid)?.startTime;
}

/** The executable name of `pid` (e.g. `redis-server`), or undefined when it cannot be read. */
export function processName(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    const r = spawnSync("ps", ["-o", "comm=", "-p", String(pid)], { encoding: "utf8" });
    const name = r.status === 0 ? r.stdout.trim() : "";
    return name === "" ? undefined : name;
  }
}
