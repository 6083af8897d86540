import type { SandboxHostConfig } from "./sandbox-ipc.js";
import { LOST, REFUSED, type SandboxCrash, SandboxProcess } from "./sandbox-process.js";
import type { HostFetch, InspectResult, RunRequest, RunResult, SandboxLimits, SandboxService } from "./types.js";

/**
 * The daemon's sandbox: the same as `Sandbox`, with the isolates in a process of their own
 * (sandbox-host.ts), so that no component can take the daemon down (docs/guide/writing-sources.md, "Limits").
 *
 * V8 cannot contain every way a component can exhaust its memory (a hash table doubling past the
 * heap's limit is an out-of-memory isolated-vm can only report as catastrophic, and a few built-ins
 * end in a V8 fatal error), and after either the process that hosts the isolate must end. Here that
 * is the sandbox process: the daemon sends new work to a fresh one at once, the runs in flight in
 * the old one finish (or, if it crashed outright, end with SANDBOX_CRASHED), and a metadata read
 * it ended under is tried once more in the fresh one.
 *
 * The process starts with the first request, not before: a daemon that never runs a component
 * never starts one.
 */

export interface ProcessSandboxOptions {
  /** The network for the guest's `fetch`; the default refuses every request. */
  fetch?: HostFetch;
  /** Healthy isolates kept between runs (default 4). */
  maxIdleIsolates?: number;
  /** Isolates alive at once (default 16); more runs wait their turn. */
  maxIsolates?: number;
  /** Bytes of compiled code a sandbox process keeps by key between runs (default 64 MB). */
  codeCacheBytes?: number;
  /** Told when a sandbox process ended other than by close(): the daemon logs it. */
  onCrash?: (crash: SandboxCrash) => void;
}

export type { SandboxCrash } from "./sandbox-process.js";

const unavailableFetch: HostFetch = async () => {
  throw new Error("fetch unavailable");
};

export class ProcessSandbox implements SandboxService {
  private current: SandboxProcess | undefined;
  private readonly processes = new Set<SandboxProcess>();
  private closed = false;
  /** codeTransfers of processes that have ended. */
  private ended = 0;
  private readonly config: SandboxHostConfig;

  constructor(
    limits: SandboxLimits,
    private readonly options: ProcessSandboxOptions = {},
  ) {
    this.config = {
      limits,
      maxIsolates: options.maxIsolates,
      maxIdleIsolates: options.maxIdleIsolates,
      codeCacheBytes: options.codeCacheBytes,
    };
  }

  async run(req: RunRequest): Promise<RunResult> {
    // A run turned away by a process that was ending never started: it goes to a fresh one.
    for (;;) {
      if (this.closed) {
        const msg = "the sandbox was shut down during the run";
        const error = { code: "SANDBOX_CLOSED", msg, stack: `Error: ${msg}`, ts: new Date().toISOString() };
        return { emits: [], logs: [], db: req.db, dbChanged: false, error, responded: false, durationMs: 0 };
      }
      const result = await this.process().run(req);
      if (result !== REFUSED) return result;
    }
  }

  async inspect(compiledCode: string, timeoutMs: number): Promise<InspectResult> {
    // Reading metadata has no side effect: one lost to another request's crash is read again.
    for (let attempt = 0; attempt < 2; attempt++) {
      if (this.closed) throw new Error("the sandbox is closed");
      const result = await this.process().inspect(compiledCode, timeoutMs);
      if (result !== LOST) return result;
    }
    return { ok: false, reason: "the code crashed the sandbox while loading (V8 could not contain what it did)" };
  }

  /**
   * Starts the sandbox process now rather than with the first request: a process started from
   * source (tsx) takes a second or more, which the first run would otherwise wait.
   */
  warm(): void {
    if (!this.closed) this.process();
  }

  /** Times compiled code crossed to a sandbox process (tests, operators' tools). */
  get codeTransfers(): number {
    let n = this.ended;
    for (const p of this.processes) n += p.codeTransfers;
    return n;
  }

  /** The ids of the sandbox processes alive (operators' tools and tests). */
  processIds(): number[] {
    return [...this.processes].flatMap((p) => (p.pid === undefined ? [] : [p.pid]));
  }

  /** Ends every sandbox process; runs in progress end with SANDBOX_CLOSED. Idempotent. */
  close(): void {
    this.closed = true;
    for (const p of this.processes) p.close();
  }

  /** The process that takes new work, started when there is none that can. */
  private process(): SandboxProcess {
    if (this.current && !this.current.retired) return this.current;
    const p: SandboxProcess = new SandboxProcess(this.config, {
      fetch: this.options.fetch ?? unavailableFetch,
      onRetire: () => {
        if (this.current === p) this.current = undefined;
      },
      onExit: (crash, expected) => {
        this.processes.delete(p);
        this.ended += p.codeTransfers;
        if (this.current === p) this.current = undefined;
        if (!expected) this.options.onCrash?.(crash);
      },
    });
    this.processes.add(p);
    this.current = p;
    return p;
  }
}
