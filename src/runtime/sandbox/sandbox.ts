import ivm from "isolated-vm";
import { copyPrefix, HostBridge, metadataHostCallback, RunLimitError } from "./host-bridge.js";
import { IsolatePool, type Lease } from "./isolate-pool.js";
import {
  CROSSING_LIMITS,
  DEFAULT_LIMITS,
  type HostFetch,
  type InspectResult,
  type ResolvedLimits,
  type RunError,
  type RunRequest,
  type RunResult,
  type SandboxLimits,
  type SandboxService,
} from "./types.js";

export type { InspectResult } from "./types.js";

/**
 * Runs component code (compiled by compileComponent) in isolated-vm isolates (SPEC §5).
 *
 * Each run gets a fresh context in a pooled isolate, the guest prelude (console, fetch, timers,
 * process.env) and a host bridge that collects emits, logs and db writes. One wall-clock timer
 * covers the whole run, awaits included: when it fires, the isolate is disposed, which stops
 * synchronous loops and abandons pending promises alike. A memory kill also disposes the isolate
 * (isolated-vm does it). Either way the pool replaces the isolate and the daemon carries on.
 *
 * Run with `node --no-node-snapshot` (isolated-vm needs it on Node 20+).
 */

export interface SandboxOptions {
  /** The network for the guest's `fetch`; the default refuses every request. */
  fetch?: HostFetch;
  /** Healthy isolates kept between runs (default 4). */
  maxIdleIsolates?: number;
  /** Isolates alive at once, i.e. concurrent runs (default 16); more runs wait their turn. */
  maxIsolates?: number;
  /**
   * isolated-vm's "V8 lost control of an isolate" signal. The run or metadata read in that isolate
   * ends at once with an error saying so, and the other isolates carry on; the process must finish
   * its outstanding work and end (isolated-vm parks the isolate's thread for good), as
   * sandbox-host.ts does. Without it, isolated-vm aborts the process on the spot.
   */
  onCatastrophicError?: (message: string) => void;
}

const unavailableFetch: HostFetch = async () => {
  throw new Error("fetch unavailable");
};

/** How long a finished run's isolate may take to answer before it is presumed stuck. */
const PING_DEADLINE_MS = 250;
const MAX_MESSAGE = CROSSING_LIMITS.maxErrorMessageLength;
const MAX_STACK = CROSSING_LIMITS.maxErrorStackLength;

export class Sandbox implements SandboxService {
  private readonly limits: ResolvedLimits;
  private readonly pool: IsolatePool;
  private readonly fetch: HostFetch;
  /** How to end the run or metadata read that holds each leased isolate, at once. */
  private readonly stoppers = new Map<Lease, (err: RunLimitError) => void>();

  constructor(limits: SandboxLimits, options: SandboxOptions = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
    this.fetch = options.fetch ?? unavailableFetch;
    const report = options.onCatastrophicError;
    this.pool = new IsolatePool({
      memoryMb: limits.memoryMb,
      maxIdle: options.maxIdleIsolates,
      maxIsolates: options.maxIsolates,
      onCatastrophicError: report
        ? (message, lease) => {
            // The isolate's thread is parked for good: whatever awaits it would wait forever.
            this.stoppers.get(lease)?.(catastropheError(message, this.limits));
            this.pool.kill(lease);
            report(message);
          }
        : undefined,
    });
  }

  async run(req: RunRequest): Promise<RunResult> {
    const lease = await this.pool.acquire();
    // Time spent waiting for an isolate is not the component's: the clock starts now.
    const started = performance.now();
    const deadline = started + this.limits.timeoutMs;
    let timedOut = false;
    let abortRun: (reason: unknown) => void = () => {};
    const aborted = new Promise<never>((_, reject) => {
      abortRun = reject;
    });
    aborted.catch(() => {});
    this.stoppers.set(lease, abortRun);
    const bridge = new HostBridge({ limits: this.limits, fetch: this.fetch, db: req.db, onRespond: req.onRespond, onFault: abortRun });
    const timer = setTimeout(() => {
      // An isolate isolated-vm already disposed for its memory limit did not time out.
      timedOut = !lease.isolate.isDisposed;
      this.pool.kill(lease);
      abortRun(new Error("timed out"));
    }, this.limits.timeoutMs);
    let context: ivm.Context | undefined;
    let error: RunError | undefined;
    // Whether the isolate itself failed (limit, kill, isolated-vm error), as opposed to the component throwing.
    let isolateFailed = false;
    try {
      const execution = this.execute(lease, bridge, req, deadline, (c) => {
        context = c;
      });
      execution.catch(() => {}); // when `aborted` wins the race, this one rejects later
      const guestError = await Promise.race([execution, aborted]);
      if (guestError) error = fromGuest(guestError);
    } catch (err) {
      isolateFailed = true;
      error = this.classify(err, lease, timedOut);
    } finally {
      clearTimeout(timer);
      this.stoppers.delete(lease);
      bridge.close();
    }
    void this.recycle(lease, context, !isolateFailed);
    return {
      emits: bridge.emits,
      logs: bridge.logEntries(),
      db: bridge.dbState(),
      dbChanged: bridge.dbChanged,
      ...(error ? { error } : {}),
      responded: bridge.responded,
      durationMs: Math.round(performance.now() - started),
    };
  }

  /**
   * Evaluates a compiled component and describes it (key, name, version, description, dedupe,
   * props as data with functions marked, hooks). Only console works while it loads; a failure to
   * load (throw, no component object, time or memory limit) is `{ok: false, reason}`.
   */
  async inspect(compiledCode: string, timeoutMs: number): Promise<InspectResult> {
    const lease = await this.pool.acquire();
    const deadline = performance.now() + timeoutMs;
    let context: ivm.Context | undefined;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.pool.kill(lease);
    }, timeoutMs);
    let healthy = false;
    const refs: ivm.Reference[] = [];
    let stop: (err: RunLimitError) => void = () => {};
    const stopped = new Promise<never>((_, reject) => {
      stop = reject;
    });
    stopped.catch(() => {});
    this.stoppers.set(lease, stop);
    try {
      const load = async () => {
        context = await lease.isolate.createContext();
        const dispatch = await this.pool.install(lease, context, metadataHostCallback(), remaining(deadline));
        refs.push(dispatch);
        const factory = await this.pool.factory(lease, context, compiledCode, remaining(deadline));
        refs.push(factory);
        return dispatch.apply(undefined, ["load", factory.derefInto()], { result: { copy: true }, timeout: remaining(deadline) });
      };
      const loading = load();
      loading.catch(() => {}); // when `stopped` wins the race, this one never settles
      const out = await Promise.race([loading, stopped]);
      healthy = true;
      return parseInspect(typeof out === "string" ? JSON.parse(out) : undefined);
    } catch (err) {
      const e = this.classify(err, lease, timedOut);
      if (e.code === "TIMEOUT") return { ok: false, reason: `the code did not finish loading within ${timeoutMs} ms` };
      if (e.code === "MEMORY_LIMIT") return { ok: false, reason: `the code used more than ${this.limits.memoryMb} MB while loading` };
      if (e.code === "SANDBOX_CLOSED") throw new Error("the sandbox is closed");
      return { ok: false, reason: `the code could not be evaluated: ${e.msg}` };
    } finally {
      clearTimeout(timer);
      this.stoppers.delete(lease);
      releaseAll(refs);
      void this.recycle(lease, context, healthy);
    }
  }

  /** Disposes every isolate; runs in progress end with a SANDBOX_CLOSED error. Idempotent. */
  close(): void {
    this.pool.close();
  }

  private async execute(lease: Lease, bridge: HostBridge, req: RunRequest, deadline: number, onContext: (c: ivm.Context) => void) {
    // References into the context keep it alive in the (reused) isolate until released: without
    // this, every run leaves its context behind and the isolate runs out of memory after a few
    // hundred runs.
    const refs: ivm.Reference[] = [];
    try {
      const context = await lease.isolate.createContext();
      onContext(context);
      const dispatch = await this.pool.install(lease, context, bridge.callback, remaining(deadline));
      refs.push(dispatch);
      // No isolated-vm `timeout` on these entries (see GuestEntries): the run's timer bounds them.
      bridge.attach({
        settle: (id, ok, value) => dispatch.apply(undefined, ["settle", id, ok, value], { arguments: { copy: true } }),
        tick: () => dispatch.apply(undefined, ["tick"], { result: { promise: true, copy: true } }),
      });
      const factory = await this.pool.factory(lease, context, req.compiledCode, remaining(deadline));
      refs.push(factory);
      const payload = new ivm.ExternalCopy({
        method: req.method,
        sourceId: req.sourceId,
        props: req.props,
        event: req.event,
        limits: this.limits,
      });
      return (await dispatch.apply(undefined, ["run", factory.derefInto(), payload.copyInto({ release: true })], {
        result: { promise: true, copy: true },
        timeout: remaining(deadline),
      })) as unknown;
    } finally {
      releaseAll(refs);
    }
  }

  /** Turns an isolated-vm failure into the run's error; the flags say who stopped the run. */
  private classify(err: unknown, lease: Lease, timedOut: boolean): RunError {
    if (err instanceof RunLimitError) return limitError(err.code, err.message);
    const message = err instanceof Error ? err.message : String(err);
    // isolated-vm's own verdict comes first: a memory kill is MEMORY_LIMIT even when the run's
    // deadline passed before the failure reached us (a busy machine).
    if (/memory limit/i.test(message)) return memoryError(this.limits.memoryMb);
    if (timedOut || /execution timed out/i.test(message)) {
      return limitError("TIMEOUT", `the run exceeded the time limit of ${this.limits.timeoutMs} ms`);
    }
    if (this.pool.isClosed) return limitError("SANDBOX_CLOSED", "the sandbox was shut down during the run");
    // Besides our time-out, isolated-vm disposes an isolate on its own only for its memory limit.
    if (lease.isolate.isDisposed) return memoryError(this.limits.memoryMb);
    return limitError("SANDBOX_ERROR", clip(message, MAX_MESSAGE));
  }

  /**
   * Gives the isolate back to the pool once it answers a trivial script: if code left behind by
   * the run (a promise chain still looping) holds the isolate, the next run must not inherit it.
   */
  private async recycle(lease: Lease, context: ivm.Context | undefined, healthy: boolean): Promise<void> {
    let ok = healthy && context !== undefined && !lease.isolate.isDisposed;
    if (ok && context) ok = await ping(context);
    try {
      context?.release();
    } catch {
      // The isolate is already gone.
    }
    this.pool.release(lease, ok);
  }
}

function releaseAll(refs: readonly ivm.Reference[]): void {
  for (const r of refs) {
    try {
      r.release();
    } catch {
      // Already released, or the isolate is gone.
    }
  }
}

async function ping(context: ivm.Context): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), PING_DEADLINE_MS);
  });
  const answer = context.eval("0", { timeout: PING_DEADLINE_MS }).then(
    () => true,
    () => false,
  );
  const ok = await Promise.race([answer, late]);
  clearTimeout(timer);
  return ok;
}

function remaining(deadline: number): number {
  return Math.max(1, Math.ceil(deadline - performance.now()));
}

/** The run's error when isolated-vm reports that V8 lost control of its isolate. */
function catastropheError(message: string, limits: ResolvedLimits): RunLimitError {
  if (/out-of-memory/i.test(message)) {
    return new RunLimitError(
      "MEMORY_LIMIT",
      `the run exceeded the memory limit of ${limits.memoryMb} MB in a way V8 could not contain (${message})`,
    );
  }
  if (/terminate/i.test(message)) {
    return new RunLimitError("TIMEOUT", `the run did not stop at the time limit of ${limits.timeoutMs} ms (${message})`);
  }
  return new RunLimitError("SANDBOX_ERROR", `V8 lost control of the run's isolate (${message})`);
}

function memoryError(memoryMb: number): RunError {
  return limitError("MEMORY_LIMIT", `the run exceeded the memory limit of ${memoryMb} MB`);
}

function limitError(code: string, msg: string): RunError {
  return { code, msg, stack: `Error: ${msg}`, ts: new Date().toISOString() };
}

/** The guest's error descriptor (guest-component.ts `errorInfo`), checked field by field. */
function fromGuest(raw: unknown): RunError {
  const r = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  return {
    code: typeof r.code === "string" && r.code !== "" ? clip(r.code, CROSSING_LIMITS.maxErrorCodeLength) : "Error",
    msg: typeof r.msg === "string" ? clip(r.msg, MAX_MESSAGE) : "",
    stack: typeof r.stack === "string" ? clip(r.stack, MAX_STACK) : "",
    ts: new Date().toISOString(),
  };
}

function parseInspect(raw: unknown): InspectResult {
  const r = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  if (r.ok === true) return { ok: true, component: r.component };
  return { ok: false, reason: typeof r.reason === "string" ? clip(r.reason, MAX_MESSAGE) : "the code could not be loaded" };
}

function clip(s: string, max: number): string {
  return s.length > max ? `${copyPrefix(s, max)}…` : s;
}
