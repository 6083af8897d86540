import { chmodSync, closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from "node:fs";
import path from "node:path";
import { processAlive, processName, processStartTime } from "./host-process.js";

/**
 * The embedded Redis's data directory: who may read it, and who owns it. The directory holds the
 * append-only file (every event and API-key digest) and `redis.url` (which carries the server's
 * password), so it is the owner's alone: 0700, files 0600. One daemon at a time owns it, recorded
 * in `owner.lock`; a second redis-server on the same append-only file would corrupt it.
 */

/** Written by the daemon (0600): the URL, with password, of the server it runs; read by the CLI. */
export const embeddedUrlFile = (dir: string): string => path.join(dir, "redis.url");
/** Written by redis-server itself (`--pidfile`), removed when it shuts down cleanly. */
export const serverPidFile = (dir: string): string => path.join(dir, "redis.pid");
/** `<daemon pid> <start time>` of the daemon that owns the directory. */
export const ownerLockFile = (dir: string): string => path.join(dir, "owner.lock");

export class DataDirInUseError extends Error {}

/**
 * Creates `dir` as 0700, or tightens an existing one (and what is in it, two levels deep: the
 * append-only directory of Redis 7) written by a version that left them readable.
 */
export function prepareDataDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      chmodSync(p, 0o700);
      for (const inner of readdirSync(p, { withFileTypes: true })) if (inner.isFile()) chmodSync(path.join(p, inner.name), 0o600);
    } else if (entry.isFile()) {
      chmodSync(p, 0o600);
    }
  }
}

export interface DataDirLock {
  /** Removes the lock file if this process still owns it. Idempotent. */
  release(): void;
}

interface Owner {
  readonly pid: number;
  readonly startTime: string | undefined;
}

function readOwner(file: string): Owner | undefined {
  try {
    const [pid, startTime] = readFileSync(file, "utf8").trim().split(" ");
    const n = Number(pid);
    return Number.isInteger(n) && n > 0 ? { pid: n, startTime: startTime === "-" ? undefined : startTime } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Alive and the same process that wrote the lock. The start time tells a reused pid apart (after a
 * container restart the new daemon often has the old one's pid, and another process may hold it).
 */
function ownerAlive(owner: Owner): boolean {
  if (owner.pid === process.pid || !processAlive(owner.pid)) return false;
  const now = processStartTime(owner.pid);
  return owner.startTime === undefined || now === undefined || now === owner.startTime;
}

/**
 * Takes `dir` for this process (exclusive create, so two daemons starting together cannot both
 * win). A lock left by a process that is gone is taken over; one held by a live daemon is refused.
 */
export function lockDataDir(dir: string): DataDirLock {
  const file = ownerLockFile(dir);
  const content = `${process.pid} ${processStartTime(process.pid) ?? "-"}\n`;
  for (let attempt = 0; ; attempt++) {
    try {
      const fd = openSync(file, "wx", 0o600);
      writeSync(fd, content);
      closeSync(fd);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const owner = readOwner(file);
      if ((owner && ownerAlive(owner)) || attempt > 0) {
        throw new DataDirInUseError(
          `${dir} is in use by another tributary process${owner ? ` (pid ${owner.pid})` : ""}: stop it, or give this one its own DATA_DIR or a REDIS_URL`,
        );
      }
      rmSync(file, { force: true });
    }
  }
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      if (readOwner(file)?.pid === process.pid) rmSync(file, { force: true });
    },
  };
}

/**
 * Stops a redis-server that a previous owner of `dir` left running (its daemon and watchdog were
 * killed together, or it ignored SIGTERM). Call with the lock held: the previous owner is gone, so
 * the server is an orphan serving nobody. Returns its pid when there was one.
 */
export async function stopLeftoverServer(dir: string): Promise<number | undefined> {
  let pid: number;
  try {
    pid = Number(readFileSync(serverPidFile(dir), "utf8").trim());
  } catch {
    return undefined;
  }
  // A stale pid file may name an unrelated process by now: only a redis-server is ours to stop.
  if (!Number.isInteger(pid) || pid <= 0 || !processAlive(pid) || !processName(pid)?.includes("redis-server")) return undefined;
  for (const [signal, waitMs] of [
    ["SIGTERM", 10_000],
    ["SIGKILL", 5_000],
  ] as const) {
    try {
      process.kill(pid, signal);
    } catch {
      // Gone meanwhile.
    }
    const deadline = Date.now() + waitMs;
    while (processAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    if (!processAlive(pid)) return pid;
  }
  throw new Error(`could not stop the redis-server (pid ${pid}) left running on ${dir}`);
}
