import ivm from "isolated-vm";
import { maxArrayElements } from "./guest-lengths.js";
import { GUEST_PRELUDE_SOURCE } from "./guest-prelude.js";
import type { GuestEntries, HostBridge, Reply } from "./host-bridge.js";

/**
 * Where source runs execute (docs/guide/writing-sources.md §6, docs/decisions.md §Runtime): one isolate per
 * owner (a user), never handed to another owner, and inside it one long-lived context per source
 * and code, which holds the guest prelude and the evaluated component module. A run takes an idle
 * context of its source (or a new one) for itself: the guest resets everything of the previous
 * run (its outputs, `this`, timers, fetches), and what the component keeps in module scope stays.
 *
 * Bounds: at most `maxIsolates` isolates (a new owner past it waits for an idle one, which is then
 * disposed), `maxContexts` contexts in all and `maxContextsPerIsolate` per isolate (the least
 * recently used idle context goes), and contexts and isolates idle for `idleMs` are released. A
 * context that a run leaves in doubt (time-out, isolate error, a module that did not load) is
 * released at once, never reused; so are the other contexts of a source once its code changes.
 */

export interface UserIsolatesOptions {
  memoryMb: number;
  /** The run limits, handed to each context once when it is made (not with every run). */
  limits?: Record<string, number> | undefined;
  maxIsolates?: number | undefined;
  maxContexts?: number | undefined;
  maxContextsPerIsolate?: number | undefined;
  idleMs?: number | undefined;
  /** Runs after which an idle isolate is retired, so heap fragmentation cannot accumulate. */
  maxRunsPerIsolate?: number | undefined;
  /** Compiled component scripts kept per isolate. */
  scriptCacheSize?: number | undefined;
  onCatastrophicError?: ((message: string, owner: UserIsolate) => void) | undefined;
}

/** Why an isolate was disposed, for the runs it takes down with it. */
export type IsolateEnd = "timeout" | "memory" | "catastrophe" | "closed" | "evicted";

export interface UserIsolate {
  readonly owner: string;
  readonly isolate: ivm.Isolate;
  prelude: ivm.Script | undefined;
  /** Compiled component scripts by code key (RunRequest.codeKey), least recently used first. */
  readonly scripts: Map<string, ivm.Script>;
  /** Idle contexts by source id. */
  readonly idle: Map<string, SourceContext[]>;
  /** Contexts alive (idle or running). */
  contexts: number;
  /** Runs in progress. */
  active: number;
  /**
   * Runs in progress on the async path (Sandbox): while any is, the isolate may be executing on
   * isolated-vm's thread pool, and a synchronous entry would block this thread until it is done.
   */
  asyncRuns: number;
  /** Sources whose run outlasted its slice on the thread (Sandbox.enterOnThread): async from then on. */
  readonly offThread: Set<string>;
  runs: number;
  lastUsed: number;
  /** How to end each run in progress at once (catastrophic error). */
  readonly stoppers: Set<(err: Error) => void>;
  ended: IsolateEnd | undefined;
}

export interface SourceContext {
  readonly owner: UserIsolate;
  readonly sourceId: string;
  /** The code's key (RunRequest.codeKey, else the code itself). */
  readonly codeKey: string;
  readonly context: ivm.Context;
  readonly dispatch: ivm.Reference;
  /** The host's own entries into the context (fetch results, timers), for whichever run uses it. */
  readonly entries: GuestEntries;
  /** The module factory, until the first run has evaluated it. */
  factory: ivm.Reference | undefined;
  /** The run using the context now; the guest's callback goes to it. */
  bridge: HostBridge | undefined;
  /** Kept for the next run when idle (false: a hook's throwaway context). */
  readonly persistent: boolean;
  lastUsed: number;
  released: boolean;
}

/** Wraps a compiled component (CommonJS) so evaluating it yields its module factory. */
const WRAP_HEAD = "(function (exports, require, module, __filename, __dirname) {";
const WRAP_TAIL = "\n})";

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

/** Every isolate was held by other users' runs for the run's whole `maxWaitMs`. */
export class IsolatesBusyError extends Error {
  constructor() {
    super("every sandbox isolate is held by other users' runs");
  }
}

export class UserIsolates {
  /** By owner, least recently used first. */
  private readonly isolates = new Map<string, UserIsolate>();
  /** Idle contexts of every isolate, least recently used first. */
  private readonly idleLru = new Set<SourceContext>();
  private totalContexts = 0;
  private readonly waiters: Waiter[] = [];
  private closed = false;
  private readonly maxIsolates: number;
  private readonly maxContexts: number;
  private readonly maxPerIsolate: number;
  private readonly idleMs: number;
  private readonly maxRuns: number;
  private readonly cacheSize: number;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly opts: UserIsolatesOptions) {
    this.maxIsolates = opts.maxIsolates ?? 16;
    this.maxContexts = opts.maxContexts ?? 1000;
    this.maxPerIsolate = opts.maxContextsPerIsolate ?? 100;
    this.idleMs = opts.idleMs ?? 5 * 60_000;
    this.maxRuns = opts.maxRunsPerIsolate ?? 100_000;
    this.cacheSize = opts.scriptCacheSize ?? 32;
    this.sweeper = setInterval(() => this.sweep(), Math.max(1000, Math.min(this.idleMs / 4, 60_000)));
    this.sweeper.unref();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Live contexts (tests, metrics). */
  get contextCount(): number {
    return this.totalContexts;
  }

  /**
   * The owner's live isolate for one run, without waiting (counted in `active` until `release`),
   * or undefined when it must be made or waited for (`acquire`).
   */
  acquireLive(owner: string): UserIsolate | undefined {
    if (this.closed) return undefined;
    const ui = this.isolates.get(owner);
    if (!ui || ui.isolate.isDisposed) return undefined;
    // Most recently used last.
    this.isolates.delete(owner);
    this.isolates.set(owner, ui);
    ui.active++;
    ui.runs++;
    return ui;
  }

  /** The owner's isolate for one run (counted in `active` until `release`). */
  async acquire(owner: string, maxWaitMs?: number): Promise<UserIsolate> {
    const deadline = maxWaitMs === undefined ? undefined : Date.now() + maxWaitMs;
    for (;;) {
      if (this.closed) throw new Error("the sandbox is closed");
      let ui = this.isolates.get(owner);
      if (ui?.isolate.isDisposed) {
        this.forget(ui, ui.ended ?? "memory");
        ui = undefined;
      }
      if (!ui && this.isolates.size >= this.maxIsolates) this.evictIdleIsolate();
      if (!ui && this.isolates.size >= this.maxIsolates) {
        await this.wait(deadline);
        continue;
      }
      ui ??= this.create(owner);
      // Most recently used last.
      this.isolates.delete(owner);
      this.isolates.set(owner, ui);
      ui.active++;
      ui.runs++;
      return ui;
    }
  }

  /** Waits for an isolate to be released; past `deadline`, throws an IsolatesBusyError. */
  private wait(deadline: number | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (deadline === undefined) {
        this.waiters.push({ resolve, reject });
        return;
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        reject(new IsolatesBusyError());
        return;
      }
      const waiter: Waiter = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      const timer = setTimeout(() => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new IsolatesBusyError());
      }, left);
      this.waiters.push(waiter);
    });
  }

  /** The run is over: the isolate may be evicted or retired once no run uses it. */
  release(ui: UserIsolate): void {
    ui.active--;
    ui.lastUsed = Date.now();
    if (ui.isolate.isDisposed) this.forget(ui, ui.ended ?? "memory");
    else if (ui.active === 0 && ui.runs >= this.maxRuns) this.kill(ui, "evicted");
    this.waiters.shift()?.resolve();
  }

  /** Disposes the isolate now, which stops whatever runs in it. Idempotent. */
  kill(ui: UserIsolate, why: IsolateEnd): void {
    ui.ended ??= why;
    if (!ui.isolate.isDisposed) {
      try {
        ui.isolate.dispose();
      } catch {
        // Already disposed by isolated-vm itself (memory limit) between the check and the call.
      }
    }
    this.forget(ui, why);
  }

  /**
   * An idle context of `sourceId` running the code named `key`, or a new one (prelude installed,
   * module compiled but not evaluated: the run does that). `persistent` false: a context for this
   * run only.
   */
  async takeContext(
    ui: UserIsolate,
    sourceId: string,
    key: string,
    code: string,
    persistent: boolean,
    timeoutMs: number,
  ): Promise<SourceContext> {
    const idle = persistent ? this.takeIdle(ui, sourceId, key) : undefined;
    if (idle) return idle;
    this.makeRoom(ui);
    return this.createContext(ui, sourceId, key, code, persistent, timeoutMs);
  }

  /** An idle context of `sourceId` running the code named `key`, taken at once, if there is one. */
  takeIdle(ui: UserIsolate, sourceId: string, key: string): SourceContext | undefined {
    const list = ui.idle.get(sourceId);
    if (!list) return undefined;
    for (let i = list.length - 1; i >= 0; i--) {
      const ctx = list[i] as SourceContext;
      if (ctx.codeKey !== key) {
        // The source's code changed: its contexts of the old code are of no further use.
        this.releaseContext(ctx);
        continue;
      }
      this.unidle(ctx);
      return ctx;
    }
    return undefined;
  }

  /** Gives a context back after its run: kept for the next run if `reusable`, else released. */
  returnContext(ctx: SourceContext, reusable: boolean): void {
    ctx.bridge = undefined;
    const ui = ctx.owner;
    if (!reusable || !ctx.persistent || this.closed || ui.isolate.isDisposed || ctx.released) {
      this.releaseContext(ctx);
      return;
    }
    ctx.lastUsed = Date.now();
    let list = ui.idle.get(ctx.sourceId);
    if (!list) {
      list = [];
      ui.idle.set(ctx.sourceId, list);
    }
    list.push(ctx);
    this.idleLru.add(ctx);
    this.makeRoom(ui, 0);
  }

  /** Releases a context and everything that holds it in its isolate. Idempotent. */
  releaseContext(ctx: SourceContext): void {
    if (ctx.released) return;
    ctx.released = true;
    this.unidle(ctx);
    ctx.owner.contexts--;
    this.totalContexts--;
    for (const r of [ctx.dispatch, ctx.factory]) {
      try {
        r?.release();
      } catch {
        // Already released, or the isolate is gone.
      }
    }
    try {
      ctx.context.release();
    } catch {
      // The isolate is already gone.
    }
  }

  /** Disposes every isolate, running ones included (their runs fail). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweeper);
    for (const ui of [...this.isolates.values()]) this.kill(ui, "closed");
    for (const waiter of this.waiters.splice(0)) waiter.reject(new Error("the sandbox is closed"));
  }

  /** Releases contexts and isolates idle for longer than idleMs. */
  sweep(): void {
    const before = Date.now() - this.idleMs;
    for (const ctx of [...this.idleLru]) if (ctx.lastUsed <= before) this.releaseContext(ctx);
    for (const ui of [...this.isolates.values()])
      if (ui.active === 0 && ui.contexts === 0 && ui.lastUsed <= before) this.kill(ui, "evicted");
  }

  private async createContext(
    ui: UserIsolate,
    sourceId: string,
    key: string,
    code: string,
    persistent: boolean,
    timeoutMs: number,
  ): Promise<SourceContext> {
    const context = await ui.isolate.createContext();
    ui.contexts++;
    this.totalContexts++;
    // Counted from here on, so that a failure below releases what was made.
    const ctx: Mutable<SourceContext> = {
      owner: ui,
      sourceId,
      codeKey: key,
      context,
      persistent,
      lastUsed: Date.now(),
      released: false,
      bridge: undefined,
      dispatch: undefined as unknown as ivm.Reference,
      // No isolated-vm `timeout` on these (see GuestEntries): the run's timer bounds them.
      entries: {
        settle: (id, ok, value) => ctx.dispatch.apply(undefined, ["settle", id, ok, value], { arguments: { copy: true } }),
        tick: () => ctx.dispatch.apply(undefined, ["tick"], { result: { promise: true, copy: true } }),
      },
      factory: undefined,
    };
    try {
      // One callback for the context's whole life: it goes to whichever run uses the context.
      const callback = new ivm.Callback(
        (op: unknown, a: unknown, b: unknown, c: unknown, d: unknown, e: unknown): Reply =>
          ctx.bridge ? ctx.bridge.handle(op, a, b, c, d, e) : ["err", "the run has ended"],
      );
      ui.prelude ??= await ui.isolate.compileScript(`(function ($0, $1, $2) {${GUEST_PRELUDE_SOURCE}\n})`, {
        filename: "tributary-prelude.js",
      });
      const init = await ui.prelude.run(context, { reference: true, timeout: timeoutMs });
      try {
        const limits = this.opts.limits === undefined ? undefined : new ivm.ExternalCopy(this.opts.limits).copyInto({ release: true });
        ctx.dispatch = await init.apply(undefined, [callback, maxArrayElements(this.opts.memoryMb), limits], {
          result: { reference: true },
          timeout: timeoutMs,
        });
      } finally {
        init.release();
      }
      const script = await this.script(ui, key, code);
      ctx.factory = await script.run(context, { reference: true, timeout: timeoutMs });
      return ctx;
    } catch (err) {
      this.releaseContext(ctx);
      throw err;
    }
  }

  private async script(ui: UserIsolate, key: string, code: string): Promise<ivm.Script> {
    let script = ui.scripts.get(key);
    if (script) {
      ui.scripts.delete(key);
    } else {
      script = await ui.isolate.compileScript(WRAP_HEAD + code + WRAP_TAIL, { filename: "component.js" });
      if (ui.scripts.size >= this.cacheSize) {
        const [oldest, old] = ui.scripts.entries().next().value ?? [];
        if (oldest !== undefined) ui.scripts.delete(oldest);
        old?.release();
      }
    }
    ui.scripts.set(key, script);
    return script;
  }

  /** Releases least recently used idle contexts until `extra` more fit under both caps. */
  private makeRoom(ui: UserIsolate, extra = 1): void {
    if (ui.contexts + extra > this.maxPerIsolate) {
      for (const ctx of this.idleLru) {
        if (ui.contexts + extra <= this.maxPerIsolate) break;
        if (ctx.owner === ui) this.releaseContext(ctx);
      }
    }
    for (const ctx of this.idleLru) {
      if (this.totalContexts + extra <= this.maxContexts) break;
      this.releaseContext(ctx);
    }
  }

  private unidle(ctx: SourceContext): void {
    if (!this.idleLru.delete(ctx)) return;
    const list = ctx.owner.idle.get(ctx.sourceId);
    if (!list) return;
    const i = list.indexOf(ctx);
    if (i !== -1) list.splice(i, 1);
    if (list.length === 0) ctx.owner.idle.delete(ctx.sourceId);
  }

  /** Disposes the least recently used isolate no run is using, if there is one. */
  private evictIdleIsolate(): void {
    for (const ui of this.isolates.values()) {
      if (ui.active === 0) {
        this.kill(ui, "evicted");
        return;
      }
    }
  }

  /** Drops an isolate that is gone (or going) from the books, with its contexts. */
  private forget(ui: UserIsolate, why: IsolateEnd): void {
    ui.ended ??= why;
    if (this.isolates.get(ui.owner) === ui) this.isolates.delete(ui.owner);
    for (const list of [...ui.idle.values()]) for (const ctx of [...list]) this.releaseContext(ctx);
  }

  private create(owner: string): UserIsolate {
    const report = this.opts.onCatastrophicError;
    // isolated-vm calls it later, on this thread: the entry exists by then.
    let ui: UserIsolate | undefined;
    const isolate = new ivm.Isolate({
      memoryLimit: this.opts.memoryMb,
      ...(report ? { onCatastrophicError: (message: string) => ui && report(message, ui) } : {}),
    });
    ui = {
      owner,
      isolate,
      prelude: undefined,
      scripts: new Map(),
      idle: new Map(),
      contexts: 0,
      active: 0,
      asyncRuns: 0,
      offThread: new Set(),
      runs: 0,
      lastUsed: Date.now(),
      stoppers: new Set(),
      ended: undefined,
    };
    return ui;
  }
}
