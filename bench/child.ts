import { type ChildProcess, spawn } from "node:child_process";
import { appendFileSync, readFileSync } from "node:fs";
import path from "node:path";

/** Repository root (bench/ lives directly under it). */
export const ROOT = path.resolve(import.meta.dirname, "..");

/** Every child started by the bench, so an error path can still kill them all. */
const live = new Set<ChildProcess>();

process.once("exit", () => {
  for (const c of live) c.kill("SIGKILL");
});

export interface NodeChild {
  readonly name: string;
  readonly pid: number;
  /** Set when the process exits; a bench phase checks it to tell a crash from a slow run. */
  readonly exited: () => { code: number | null; signal: string | null } | undefined;
  /** Last lines of stdout/stderr, for crash reports. */
  readonly tail: () => string;
  /** Resolves with the first stdout line matching `re`; rejects on exit or after `timeoutMs`. */
  waitForLine(re: RegExp, timeoutMs: number): Promise<RegExpMatchArray>;
  /** Peak resident set size (VmHWM) in KiB, from /proc; undefined when unavailable. */
  peakRssKb(): number | undefined;
  /** SIGTERM, then SIGKILL after `graceMs`. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

/**
 * Starts `node [nodeArgs] script [args]` in the repository root with exactly `env` (plus PATH/HOME);
 * `wrapper` runs it under another program (`["valgrind", "--tool=callgrind"]`: bench/instructions.ts).
 */
export function spawnNode(
  name: string,
  nodeArgs: readonly string[],
  script: string,
  args: readonly string[],
  env: Record<string, string>,
  cwd = ROOT,
  wrapper: readonly string[] = [],
): NodeChild {
  const argv = [...wrapper, process.execPath, ...nodeArgs, script, ...args];
  const child = spawn(argv[0] as string, argv.slice(1), {
    cwd,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  if (child.pid === undefined) throw new Error(`${name}: could not spawn`);
  live.add(child);
  const lines: string[] = [];
  const lineWaiters = new Set<(line: string) => void>();
  let exitInfo: { code: number | null; signal: string | null } | undefined;
  const exitWaiters = new Set<() => void>();
  const onText = (stream: NodeJS.ReadableStream, label: string) => {
    let buf = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => {
      buf += chunk;
      let nl = buf.indexOf("\n");
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        lines.push(`${label}: ${line}`);
        // BENCH_CHILD_LOG=<dir>: every child's output, one file per child (diagnosis, e.g. --trace-gc).
        if (process.env.BENCH_CHILD_LOG) appendFileSync(`${process.env.BENCH_CHILD_LOG}/${name}-${child.pid}.log`, `${label}: ${line}\n`);
        if (lines.length > 40) lines.shift();
        if (label === "out") for (const w of lineWaiters) w(line);
        nl = buf.indexOf("\n");
      }
    });
  };
  onText(child.stdout as NodeJS.ReadableStream, "out");
  onText(child.stderr as NodeJS.ReadableStream, "err");
  child.once("exit", (code, signal) => {
    exitInfo = { code, signal };
    live.delete(child);
    for (const w of exitWaiters) w();
  });
  const pid = child.pid;
  let stopping: Promise<void> | undefined;
  return {
    name,
    pid,
    exited: () => exitInfo,
    tail: () => lines.join("\n"),
    waitForLine(re, timeoutMs) {
      return new Promise((resolve, reject) => {
        const done = () => {
          clearTimeout(timer);
          lineWaiters.delete(onLine);
          exitWaiters.delete(onExit);
        };
        const onLine = (line: string) => {
          const m = re.exec(line);
          if (m) {
            done();
            resolve(m);
          }
        };
        const onExit = () => {
          done();
          reject(new Error(`${name} exited (${JSON.stringify(exitInfo)}) before printing ${re}:\n${lines.join("\n")}`));
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${name}: no line matching ${re} within ${timeoutMs} ms:\n${lines.join("\n")}`));
        }, timeoutMs);
        lineWaiters.add(onLine);
        exitWaiters.add(onExit);
        if (exitInfo) onExit();
      });
    },
    peakRssKb() {
      try {
        const m = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
        return m ? Number(m[1]) : undefined;
      } catch {
        return undefined;
      }
    },
    stop(graceMs = 15_000) {
      stopping ??= new Promise<void>((resolve) => {
        if (exitInfo) return resolve();
        const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
        exitWaiters.add(() => {
          clearTimeout(timer);
          resolve();
        });
        child.kill("SIGTERM");
      });
      return stopping;
    },
  };
}
