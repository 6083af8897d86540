import ivm from "isolated-vm";
import { copyPrefix, type GuestOutputs, HostBridge, metadataHostCallback, RunLimitError } from "./host-bridge.js";
import { IsolatePool, type Lease } from "./isolate-pool.js";
import { IsolatesBusyError, type SourceContext, type UserIsolate, UserIsolates } from "./user-isolates.js";
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
 * Source runs (user-isolates.ts): each user has an isolate of their own, and each source a
 * long-lived context in it holding the guest prelude and the evaluated module; a run is one entry
 * into that context (`dispatch("run")`), which resets the previous run's state in the guest and
 * answers the run's console lines, emits and db writes with its result. Only `fetch`, timers and
 * `http.respond` cross during the run (the context's callback, to the run's HostBridge). A warm
 * run is entered synchronously, on this thread, for at most THREAD_SLICE_MS (`enterOnThread`).
 *
 * One wall-clock timer covers the whole run, awaits included. When it fires, the run ends and its
 * context is discarded; what it did so far is asked of the guest, and if the isolate does not
 * answer (a loop isolated-vm's own time-out cannot reach, in a timer callback) the user's isolate
 * is disposed, which stops it. A memory kill disposes the user's isolate too (isolated-vm does
 * it). Either way a fresh one serves the user's next run, and other users are untouched.
 *
 * Metadata reads (`inspect`) get a fresh context in a pooled isolate and nothing else.
 *
 * Run with `node --no-node-snapshot` (isolated-vm needs it on Node 20+).
 */

export interface SandboxOptions {
  /** The network for the guest's `fetch`; the default refuses every request. */
  fetch?: HostFetch;
  /** Healthy isolates kept between metadata reads (default 4). */
  maxIdleIsolates?: number;
  /**
   * Isolates alive at once (default 16): one per user with runs (user-isolates.ts), and as many for
   * metadata reads. A new user past it waits for another user's isolate to be idle.
   */
  maxIsolates?: number;
  /** Source contexts kept alive in all (default 1000) and per user isolate (default 100). */
  maxContexts?: number;
  maxContextsPerIsolate?: number;
  /** A context or user isolate idle this long is released (default 5 minutes). */
  idleMs?: number;
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
/**
 * How long a warm run entered on the sandbox's own thread may hold it (`enterOnThread`). A run
 * still computing then is stopped, its context discarded, and the run started again on the async
 * path, in a fresh context, with the rest of its time limit; its source runs async from then on.
 */
const THREAD_SLICE_MS = 50;
/** Sources of one user isolate whose runs outlasted a slice; past it, all its runs go async. */
const THREAD_STRIKES = 3;
/** `enterOnThread`'s answer when the run outlasted its slice. */
const SLICE_SPENT = Symbol("slice spent");
/** A run not (or no longer) entered on the thread. */
const NOT_ENTERED = Symbol("not entered");
const MAX_MESSAGE = CROSSING_LIMITS.maxErrorMessageLength;
const MAX_STACK = CROSSING_LIMITS.maxErrorStackLength;

export class Sandbox implements SandboxService {
  private readonly limits: ResolvedLimits;
  /** Fresh contexts for metadata reads (no user: the code is not a source's yet). */
  private readonly pool: IsolatePool;
  /** Source runs: an isolate per user, a long-lived context per source and code. */
  private readonly users: UserIsolates;
  private readonly fetch: HostFetch;
  /** How to end the metadata read that holds each leased isolate, at once. */
  private readonly stoppers = new Map<Lease, (err: RunLimitError) => void>();
  /**
   * The time limit of the runs in progress: one Node timer for all of them, armed for the earliest
   * deadline (every run has the same time limit, so the oldest run's deadline comes first), rather
   * than a timer made and cleared per run. Unreferenced while no run is in progress.
   */
  private readonly deadlines = new Set<RunDeadline>();
  private watchdog: NodeJS.Timeout | undefined;
  /** Warm runs entered on the sandbox's own thread, and those of them that outlasted their slice (tests, bench). */
  readonly threadRuns = { entered: 0, sliceSpent: 0 };

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
    this.users = new UserIsolates({
      memoryMb: limits.memoryMb,
      limits: { ...this.limits },
      maxIsolates: options.maxIsolates,
      maxContexts: options.maxContexts,
      maxContextsPerIsolate: options.maxContextsPerIsolate,
      idleMs: options.idleMs,
      onCatastrophicError: report
        ? (message, ui) => {
            for (const stop of ui.stoppers) stop(catastropheError(message, this.limits));
            this.users.kill(ui, "catastrophe");
            report(message);
          }
        : undefined,
    });
  }

  /** Live source contexts (tests and operators' tools). */
  get contextCount(): number {
    return this.users.contextCount;
  }

  async run(req: RunRequest): Promise<RunResult> {
    // A run without a user gets an isolate of its source's own: never one shared with other code.
    const owner = req.userId !== undefined ? `user:${req.userId}` : `source:${req.sourceId}`;
    let ui = this.users.acquireLive(owner);
    if (!ui) {
      try {
        ui = await this.users.acquire(owner, req.maxWaitMs);
      } catch (err) {
        if (!(err instanceof IsolatesBusyError)) throw err;
        const error = limitError("SANDBOX_BUSY", err.message);
        return { emits: [], logs: [], db: req.db, dbChanged: false, error, responded: false, durationMs: 0 };
      }
    }
    const isolate = ui;
    // Time spent waiting for an isolate is not the component's: the clock starts now.
    const started = performance.now();
    const deadline = started + this.limits.timeoutMs;
    let timedOut = false;
    // The run's outcome: the guest's answer, or the first reason to stop it (time-out, a fault
    // while settling a fetch or firing timers, a catastrophic error). One promise for both.
    let finish: (value: unknown) => void = noop;
    let abortRun: (reason: unknown) => void = noop;
    const outcome = new Promise<unknown>((resolve, reject) => {
      finish = resolve;
      abortRun = reject;
    });
    ui.stoppers.add(abortRun);
    const bridgeOptions = { limits: this.limits, fetch: this.fetch, db: req.db, onRespond: req.onRespond, onFault: abortRun };
    let bridge = new HostBridge(bridgeOptions);
    const limit: RunDeadline = {
      at: deadline,
      expire: () => {
        // An isolate isolated-vm already disposed for its memory limit did not time out.
        timedOut = !isolate.isolate.isDisposed;
        abortRun(new Error("timed out"));
      },
    };
    this.watch(limit);
    const key = req.codeKey ?? req.compiledCode;
    // A warm run takes its source's idle context at once; a cold one makes it first.
    let ctx = req.method === "run" ? this.users.takeIdle(ui, req.sourceId, key) : undefined;
    let out: GuestOutputs | undefined;
    let error: RunError | undefined;
    // Whether the context may serve the next run of its source: not after any failure but the
    // component's own (a time-out, a limit, an isolated-vm error leave its state in doubt).
    let reusable = false;
    // Counted in ui.asyncRuns while it is (see mayEnterOnThread).
    let onAsyncPath = false;
    const goAsync = () => {
      if (onAsyncPath) return;
      ui.asyncRuns++;
      onAsyncPath = true;
    };
    try {
      // A warm run is entered synchronously: it costs a fraction of an async entry, and a run that
      // awaits a fetch or a timer goes on asynchronously.
      let entered: unknown = NOT_ENTERED;
      if (ctx && ctx.factory === undefined && this.mayEnterOnThread(ui, req.sourceId)) {
        entered = this.enterOnThread(ctx, bridge, req, deadline);
        if (entered === SLICE_SPENT) {
          // Nothing of the stopped attempt survives: its context, its fetches and timers go.
          this.threadRuns.sliceSpent++;
          ui.offThread.add(req.sourceId);
          this.users.returnContext(ctx, false);
          ctx = undefined;
          bridge.close();
          const responded = bridge.responded;
          bridge = new HostBridge(bridgeOptions);
          // An HTTP request the stopped attempt answered stays answered: the first response wins
          // across attempts, as it does within one (HostBridge.respond).
          bridge.responded = responded;
          entered = NOT_ENTERED;
        }
      }
      // From here on, a run that was not answered on the thread is an async run of its isolate.
      if (entered === NOT_ENTERED || entered instanceof Promise) goAsync();
      if (entered instanceof Promise) {
        entered.then(finish, abortRun);
      } else if (entered !== NOT_ENTERED) {
        finish(entered);
      } else if (ctx) {
        enter(ctx, bridge, req, deadline).then(finish, abortRun);
      } else {
        (async () => {
          ctx = await this.users.takeContext(isolate, req.sourceId, key, req.compiledCode, req.method === "run", remaining(deadline));
          return enter(ctx, bridge, req, deadline);
        })().then(finish, abortRun);
      }
      out = asOutputs(await outcome);
      reusable = out !== undefined && out.discard !== true;
    } catch (err) {
      error = this.classify(err, ui, timedOut);
      // Collecting what the run did below is async too.
      goAsync();
      // What the run did so far is in its context: asked for, if the isolate still answers. If
      // it does not (a loop in a timer callback), it is disposed: only its user's runs are in it.
      if (!ui.isolate.isDisposed && error.code !== "SANDBOX_CLOSED") {
        out = ctx
          ? asOutputs(await answer(ctx.dispatch.apply(undefined, ["collect"], { result: { copy: true }, timeout: PING_DEADLINE_MS })))
          : undefined;
        if (
          out === undefined &&
          !(ctx === undefined && (await answer(ui.isolate.compileScript("0").then((s) => s.release()))) !== undefined)
        ) {
          this.users.kill(ui, "timeout");
        }
      }
    } finally {
      if (onAsyncPath) ui.asyncRuns--;
      this.unwatch(limit);
      ui.stoppers.delete(abortRun);
      bridge.close();
    }
    if (out) {
      const refused = bridge.absorb(out);
      if (!error && out.error) error = fromGuest(out.error);
      if (refused !== undefined) {
        error ??= limitError("Error", clip(refused, MAX_MESSAGE));
        reusable = false;
      }
    }
    if (ctx) this.users.returnContext(ctx, reusable);
    this.users.release(ui);
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
    this.users.close();
    clearTimeout(this.watchdog);
    this.watchdog = undefined;
  }

  /**
   * A warm run entered by synchronous calls on this thread (two hops, `start` then `take`, no
   * thread pool): its outputs, or a promise of them when it awaits a fetch or a timer, or
   * SLICE_SPENT when it computed past THREAD_SLICE_MS (stopped there by isolated-vm). Failures
   * come back as a rejected promise, as from the async entry.
   */
  private enterOnThread(c: SourceContext, bridge: HostBridge, req: RunRequest, deadline: number): unknown {
    c.bridge = bridge;
    bridge.attach(c.entries);
    const left = remaining(deadline);
    const slice = Math.min(THREAD_SLICE_MS, left);
    this.threadRuns.entered++;
    try {
      c.dispatch.applySync(undefined, ["start", runPayload(req, bridge)], { arguments: COPY, timeout: slice });
      const out: unknown = c.dispatch.applySync(undefined, ["take"], { result: COPY, timeout: slice });
      if (out !== null) return out;
    } catch (err) {
      // Only the slice ended here: the run's own time limit is further away.
      if (slice < left && /execution timed out/i.test(err instanceof Error ? err.message : String(err))) return SLICE_SPENT;
      return Promise.reject(err);
    }
    return c.dispatch.apply(undefined, ["wait"], { result: PROMISE_COPY, timeout: remaining(deadline) });
  }

  /**
   * Whether a warm run may be entered on this thread: not while another run of the same isolate
   * is on the async path (the isolate may be executing on isolated-vm's thread pool, and a
   * synchronous entry would wait for it, holding every other user's runs: no time-out covers
   * that wait), nor for a source or isolate that outlasted its slices.
   */
  private mayEnterOnThread(ui: UserIsolate, sourceId: string): boolean {
    return ui.asyncRuns === 0 && ui.offThread.size < THREAD_STRIKES && !ui.offThread.has(sourceId);
  }

  private watch(d: RunDeadline): void {
    this.deadlines.add(d);
    if (this.watchdog === undefined) this.watchdog = setTimeout(() => this.expire(), this.limits.timeoutMs);
    else if (this.deadlines.size === 1) this.watchdog.ref();
  }

  private unwatch(d: RunDeadline): void {
    this.deadlines.delete(d);
    if (this.deadlines.size === 0) this.watchdog?.unref();
  }

  /** Ends the runs whose deadline has passed, and arms the timer for the next one. */
  private expire(): void {
    this.watchdog = undefined;
    const now = performance.now();
    for (const d of this.deadlines) {
      if (d.at > now) {
        this.watchdog = setTimeout(() => this.expire(), Math.ceil(d.at - now));
        return;
      }
      this.deadlines.delete(d);
      d.expire();
    }
  }

  /** Turns an isolated-vm failure into the run's error; the flags say who stopped the run. */
  private classify(err: unknown, unit: Lease | UserIsolate, timedOut: boolean): RunError {
    if (err instanceof RunLimitError) return limitError(err.code, err.message);
    const message = err instanceof Error ? err.message : String(err);
    // isolated-vm's own verdict comes first: a memory kill is MEMORY_LIMIT even when the run's
    // deadline passed before the failure reached us (a busy machine).
    if (/memory limit/i.test(message)) return memoryError(this.limits.memoryMb);
    if (timedOut || /execution timed out/i.test(message)) {
      return limitError("TIMEOUT", `the run exceeded the time limit of ${this.limits.timeoutMs} ms`);
    }
    if (this.pool.isClosed || this.users.isClosed) return limitError("SANDBOX_CLOSED", "the sandbox was shut down during the run");
    if ("owner" in unit && unit.ended === "timeout") {
      return limitError(
        "TIMEOUT",
        `the run was stopped with its user's isolate, which another run of the same user held past the time limit of ${this.limits.timeoutMs} ms`,
      );
    }
    // Besides time-outs, isolated-vm disposes an isolate on its own only for its memory limit.
    if (unit.isolate.isDisposed) return memoryError(this.limits.memoryMb);
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

interface RunDeadline {
  /** performance.now() at which the run's time is up. */
  at: number;
  expire: () => void;
}

const noop = (): void => {};
const COPY = { copy: true } as const;
const PROMISE_COPY = { promise: true, copy: true } as const;

/**
 * The run's one entry into its context: `dispatch("run")`, which answers the run's outputs. No
 * isolated-vm `timeout` on the fetch and timer entries (see GuestEntries): the run's timer bounds them.
 */
function enter(c: SourceContext, bridge: HostBridge, req: RunRequest, deadline: number): Promise<unknown> {
  c.bridge = bridge;
  bridge.attach(c.entries);
  const payload = runPayload(req, bridge);
  const factory = c.factory;
  if (!factory)
    return c.dispatch.apply(undefined, ["run", undefined, payload], {
      arguments: COPY,
      result: PROMISE_COPY,
      timeout: remaining(deadline),
    });
  // The first run of the context evaluates the module: the factory goes in as a reference.
  c.factory = undefined;
  return enterFirst(c, factory, payload, deadline);
}

/** What the guest's run receives: the request's data and the run's db state. */
function runPayload(req: RunRequest, bridge: HostBridge): object {
  return { method: req.method, sourceId: req.sourceId, props: req.props, event: req.event, db: bridge.dbEntries() };
}

async function enterFirst(c: SourceContext, factory: ivm.Reference, payload: object, deadline: number): Promise<unknown> {
  try {
    return await c.dispatch.apply(undefined, ["run", factory.derefInto(), new ivm.ExternalCopy(payload).copyInto({ release: true })], {
      result: PROMISE_COPY,
      timeout: remaining(deadline),
    });
  } finally {
    factory.release();
  }
}

/** The guest's outputs (guest-component.ts `outputs`), or undefined for anything else. */
function asOutputs(raw: unknown): GuestOutputs | undefined {
  return typeof raw === "object" && raw !== null && !Array.isArray(raw) ? (raw as GuestOutputs) : undefined;
}

/** What the isolate answers within PING_DEADLINE_MS, or undefined (no answer, or an error). */
async function answer<T>(call: Promise<T>): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), PING_DEADLINE_MS);
  });
  const settled = call.then(
    (v) => v,
    () => undefined,
  );
  const v = await Promise.race([settled, late]);
  clearTimeout(timer);
  return v;
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
