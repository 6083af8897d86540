/**
 * The sandbox's contract with its callers (source runner, component loader). Everything here is
 * plain data: values cross the isolate boundary only as copies.
 */

export interface SandboxLimits {
  /** Memory limit of one isolate (SANDBOX_MEMORY_MB). */
  memoryMb: number;
  /** Wall-clock limit of one run or hook, awaits included (SANDBOX_TIMEOUT_MS). */
  timeoutMs: number;
  /** `$emit` calls accepted per run; more throw inside the run. */
  maxEmitsPerRun?: number;
  /** Largest emitted event, as JSON. */
  maxEventBytes?: number;
  /** Console lines kept per run; the rest are counted in one final line. */
  maxLogLinesPerRun?: number;
  /** Longest console line kept; longer ones are cut. */
  maxLogLineBytes?: number;
  /** Largest db state, as JSON, a run may leave behind. */
  maxDbBytes?: number;
  /** `fetch` calls allowed per run. */
  maxFetchesPerRun?: number;
  /** `fetch` calls of one run in flight at once; more wait their turn (bounds what the daemon buffers). */
  maxFetchesInFlightPerRun?: number;
  /** Bytes of response bodies one run's fetches may receive in all; past it a fetch fails. */
  maxFetchBytesPerRun?: number;
  /** Largest response body of one fetch (the daemon caps it at 5 MB whatever this says). */
  maxFetchResponseBytes?: number;
  /**
   * Timer callbacks (setTimeout, setInterval, setImmediate) fired per run; past it the run ends
   * with TIMER_LIMIT. Bounds how often a run re-enters its isolate.
   */
  maxTimerFiringsPerRun?: number;
}

/** Defaults for the optional limits: generous for real components, bounded for the host's memory. */
export const DEFAULT_LIMITS = {
  maxEmitsPerRun: 10_000,
  maxEventBytes: 1024 * 1024,
  maxLogLinesPerRun: 1000,
  maxLogLineBytes: 16 * 1024,
  maxDbBytes: 4 * 1024 * 1024,
  maxFetchesPerRun: 100,
  maxFetchesInFlightPerRun: 4,
  maxFetchBytesPerRun: 20 * 1024 * 1024,
  maxFetchResponseBytes: 5 * 1024 * 1024,
  maxTimerFiringsPerRun: 10_000,
} as const;

/**
 * Fixed bounds on what one run may pass to the host, applied in the guest before anything is
 * copied out of the isolate (an isolate's memory limit does not bound the host's memory) and
 * checked again by the host.
 */
export const CROSSING_LIMITS = {
  /** Timers pending at once in one run. */
  maxPendingTimers: 1000,
  /** Longest `fetch` URL. */
  maxUrlLength: 16 * 1024,
  /** Largest `$emit` metadata as JSON (its fields have their own limits; escapes make it longer). */
  maxEmitMetaLength: 128 * 1024,
  /** Largest header list of a `fetch` or `http.respond`, as JSON. */
  maxHeadersLength: 64 * 1024,
  /** Longest error code, message and stack of a failed run. */
  maxErrorCodeLength: 200,
  maxErrorMessageLength: 4 * 1024,
  maxErrorStackLength: 16 * 1024,
  /** Longest string in a component's metadata (name, a prop's description, an option...). */
  maxMetadataString: 64 * 1024,
  /** All strings of a component's metadata together (keys included, each use counted). */
  maxMetadataChars: 256 * 1024,
} as const;

/** Emitted JSON per run (events and their metadata), as a multiple of the largest event. */
export const EMIT_BUDGET_EVENTS = 16;
/** `db.set` data per run (keys and values as JSON), as a multiple of the largest state. */
export const DB_WRITE_BUDGET_STATES = 4;

export type ResolvedLimits = Required<SandboxLimits>;

export interface HostFetchInit {
  method: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  /** Aborted when the run ends or times out. */
  signal: AbortSignal;
  /** The largest body this response may have (what is left of the run's budget); the host's own cap applies too. */
  maxBytes?: number;
}

export interface HostFetchResponse {
  status: number;
  statusText?: string;
  headers: Record<string, string>;
  /** The response body as text. */
  body: string;
}

/**
 * The network as the sandbox sees it. The caller supplies one that applies the SSRF guard and its
 * size and time limits; the sandbox only marshals requests and responses.
 */
export type HostFetch = (url: string, init: HostFetchInit) => Promise<HostFetchResponse>;

export type RunMethod = "run" | "deploy" | "activate" | "deactivate";

export interface HttpResponse {
  status: number;
  headers: Record<string, string>;
  body: string | Buffer;
}

export interface RunRequest {
  /** Output of compileComponent. */
  compiledCode: string;
  /**
   * A stable name of `compiledCode` (the runner gives the component id and code hash,
   * compiled-code.ts `codeKey`): contexts and scripts are found by it without comparing the code,
   * and a sandbox process receives the code once per key. Absent, the code itself is the key.
   */
  codeKey?: string;
  /**
   * The source's owner: runs of one user share an isolate that no other user's code ever enters.
   * Absent, the source gets an isolate of its own.
   */
  userId?: string;
  /** Becomes process.env.PD_COMPONENT. */
  sourceId: string;
  /** `run(event)`, or one of the component's hooks (a missing hook is a successful no-op). */
  method: RunMethod;
  /** Configured prop values, exposed as `this.<name>` (HTTP props also get `respond()`). */
  props: Record<string, unknown>;
  /** The source's db state before the run; `this.db.get/set` work on a copy. */
  db: Record<string, unknown>;
  event?: unknown;
  /** Called for the first `this.http.respond()` of the run only. */
  onRespond?: (response: HttpResponse) => void;
  /**
   * How long the run may wait for its user's isolate while other users hold every one; past it
   * the run never starts and ends at once with SANDBOX_BUSY. Absent: it waits its turn.
   */
  maxWaitMs?: number;
}

export interface EmitMeta {
  id?: string | number;
  name?: string;
  summary?: string;
  ts?: number;
}

export interface Emit {
  event: unknown;
  meta: EmitMeta;
}

export type LogKind = "console.log" | "console.error" | "console.warn" | "console.info" | "console.debug";

export interface LogEntry {
  /** Epoch milliseconds. */
  ts: number;
  k: LogKind;
  msg: string;
}

export interface RunError {
  /** The thrown error's `code` or name; `TIMEOUT` and `MEMORY_LIMIT` for limits we enforce. */
  code: string;
  msg: string;
  stack: string;
  /** ISO 8601. */
  ts: string;
}

export interface RunResult {
  emits: Emit[];
  logs: LogEntry[];
  /** The db state after the run (the input state when nothing changed). */
  db: Record<string, unknown>;
  dbChanged: boolean;
  error?: RunError;
  responded: boolean;
  durationMs: number;
}

/** What the guest says when it loads a component to read its metadata (see guest-component.ts). */
export type InspectResult = { ok: true; component: unknown } | { ok: false; reason: string };

/**
 * What runs component code: `Sandbox` (isolates in this process) or `ProcessSandbox` (the same
 * in a child process, so that an isolate V8 loses control of cannot take the daemon down).
 */
export interface SandboxService {
  /** Runs `run(event)` or a hook; never rejects: a failure is the result's `error`. */
  run(req: RunRequest): Promise<RunResult>;
  /** Evaluates compiled component code and describes it (metadata read). */
  inspect(compiledCode: string, timeoutMs: number): Promise<InspectResult>;
  /** Ends every run in progress (SANDBOX_CLOSED) and releases the isolates. Idempotent. */
  close(): void;
}
