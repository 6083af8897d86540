import ivm from "isolated-vm";
import { maxArrayElements } from "./guest-lengths.js";
import { GUEST_PRELUDE_SOURCE } from "./guest-prelude.js";

/**
 * Isolates are reused across runs because creating one costs milliseconds and its compiled
 * scripts can be kept; contexts are not (each run gets a fresh one, so globals, prototypes and
 * module state never pass from one run to the next). An isolate serves one run at a time, so
 * disposing it (time-out, memory kill) never hurts another run. A leased isolate either comes
 * back healthy or is disposed; the pool makes a new one when it next needs one.
 */

export interface IsolatePoolOptions {
  memoryMb: number;
  /** Isolates alive at once (each may use memoryMb); further runs wait for one. */
  maxIsolates?: number;
  /** Healthy isolates kept for reuse; extra ones are disposed. */
  maxIdle?: number;
  /** Runs after which an isolate is retired anyway, so heap fragmentation cannot accumulate. */
  maxRunsPerIsolate?: number;
  /** Compiled component scripts kept per isolate. */
  scriptCacheSize?: number;
  /** isolated-vm's "V8 lost control of this isolate" signal, with the lease whose isolate it was. */
  onCatastrophicError?: ((message: string, lease: Lease) => void) | undefined;
}

export interface Lease {
  readonly isolate: ivm.Isolate;
  /** The guest prelude, compiled once per isolate (compiling it per run costs more than the run). */
  prelude: ivm.Script | undefined;
  /** Compiled component scripts by source, least recently used first. */
  readonly scripts: Map<string, ivm.Script>;
  runs: number;
}

/** Wraps a compiled component (CommonJS) so evaluating it yields its module factory. */
const WRAP_HEAD = "(function (exports, require, module, __filename, __dirname) {";
const WRAP_TAIL = "\n})";

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

export class IsolatePool {
  private readonly idle: Lease[] = [];
  private readonly leased = new Set<Lease>();
  private readonly waiters: Waiter[] = [];
  private closed = false;
  private readonly maxIsolates: number;
  private readonly maxIdle: number;
  private readonly maxRuns: number;
  private readonly cacheSize: number;

  constructor(private readonly opts: IsolatePoolOptions) {
    this.maxIsolates = opts.maxIsolates ?? 16;
    this.maxIdle = Math.min(opts.maxIdle ?? 4, this.maxIsolates);
    this.maxRuns = opts.maxRunsPerIsolate ?? 500;
    this.cacheSize = opts.scriptCacheSize ?? 32;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** An isolate for one run; waits while maxIsolates are in use. */
  async acquire(): Promise<Lease> {
    for (;;) {
      if (this.closed) throw new Error("the sandbox is closed");
      if (this.idle.length > 0 || this.leased.size < this.maxIsolates) break;
      await new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    }
    let lease = this.idle.pop();
    while (lease?.isolate.isDisposed) lease = this.idle.pop();
    lease ??= this.create();
    lease.runs++;
    this.leased.add(lease);
    return lease;
  }

  /** Returns a lease; `reusable` false (or a dead, closed or worn-out isolate) disposes it. */
  release(lease: Lease, reusable: boolean): void {
    this.leased.delete(lease);
    const keep = reusable && !this.closed && !lease.isolate.isDisposed && lease.runs < this.maxRuns && this.idle.length < this.maxIdle;
    if (keep) this.idle.push(lease);
    else this.kill(lease);
    this.waiters.shift()?.resolve();
  }

  /** Disposes the lease's isolate now, which stops whatever runs in it. Idempotent. */
  kill(lease: Lease): void {
    if (lease.isolate.isDisposed) return;
    try {
      lease.isolate.dispose();
    } catch {
      // Already disposed by isolated-vm itself (memory limit) between the check and the call.
    }
  }

  /**
   * Runs the guest prelude in a fresh context with the host's callback as its `$0` and the longest
   * array the built-ins accept as its `$1`, and returns a reference to the guest's `dispatch` (see
   * guest-prelude.ts).
   */
  async install(lease: Lease, context: ivm.Context, callback: ivm.Callback, timeoutMs: number): Promise<ivm.Reference> {
    lease.prelude ??= await lease.isolate.compileScript(`(function ($0, $1, $2) {${GUEST_PRELUDE_SOURCE}\n})`, {
      filename: "tributary-prelude.js",
    });
    const init = await lease.prelude.run(context, { reference: true, timeout: timeoutMs });
    try {
      return await init.apply(undefined, [callback, maxArrayElements(this.opts.memoryMb)], {
        result: { reference: true },
        timeout: timeoutMs,
      });
    } finally {
      init.release();
    }
  }

  /**
   * Evaluates a compiled component in `context` and returns a reference to its module factory,
   * `(exports, require, module, __filename, __dirname) => void`. Nothing of the component runs yet.
   */
  async factory(lease: Lease, context: ivm.Context, code: string, timeoutMs: number): Promise<ivm.Reference> {
    let script = lease.scripts.get(code);
    if (script) {
      lease.scripts.delete(code);
    } else {
      script = await lease.isolate.compileScript(WRAP_HEAD + code + WRAP_TAIL, { filename: "component.js" });
      if (lease.scripts.size >= this.cacheSize) {
        const [oldest, old] = lease.scripts.entries().next().value ?? [];
        if (oldest !== undefined) lease.scripts.delete(oldest);
        old?.release();
      }
    }
    lease.scripts.set(code, script);
    return script.run(context, { reference: true, timeout: timeoutMs });
  }

  /** Disposes every isolate, including leased ones (their runs fail). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const lease of [...this.idle, ...this.leased]) this.kill(lease);
    for (const waiter of this.waiters.splice(0)) waiter.reject(new Error("the sandbox is closed"));
    this.idle.length = 0;
    this.leased.clear();
  }

  private create(): Lease {
    const report = this.opts.onCatastrophicError;
    // isolated-vm calls it later, on this thread: the lease exists by then.
    let lease: Lease | undefined;
    const isolate = new ivm.Isolate({
      memoryLimit: this.opts.memoryMb,
      ...(report ? { onCatastrophicError: (message: string) => lease && report(message, lease) } : {}),
    });
    lease = { isolate, prelude: undefined, scripts: new Map(), runs: 0 };
    return lease;
  }
}
