import ivm from "isolated-vm";
import { MAX_CUSTOM_STATUS, MIN_CUSTOM_STATUS } from "../../domain/custom-response.js";
import { checkEmitMeta, parseShallow } from "./emit-check.js";
import { GuestWake } from "./guest-wake.js";
import {
  CROSSING_LIMITS,
  DB_WRITE_BUDGET_STATES,
  EMIT_BUDGET_EVENTS,
  type Emit,
  type HostFetch,
  type HttpResponse,
  type LogEntry,
  type LogKind,
  type ResolvedLimits,
} from "./types.js";

/**
 * The host half of one run: what the guest prelude's synchronous callback does during the run
 * (`http.respond`, `fetch`, timers: `handle`), and the checks of what the guest kept and hands
 * over with the run's result (`console`, `$emit`, `db.set`: `absorb`), and the state it collects. Everything that
 * arrives is a string or a structured-clone copy made by isolated-vm; everything this module keeps
 * is bounded by the run's limits, since an isolate's memory limit does not bound the host's. The
 * guest prelude cuts what it passes to these limits before calling (the copy is made before this
 * code can look at it); the checks here hold the line whatever arrives.
 *
 * Replies are `["ok", value]` or `["err", message]` (the guest throws the message), so no host
 * exception, and no host stack trace, reaches component code.
 */

export type Reply = readonly ["ok", unknown] | readonly ["err", string];

/**
 * The entries into the guest that the host starts on its own. Neither arms an isolated-vm
 * `timeout`: the run's single wall-clock timer (Sandbox.run) disposes the isolate at the deadline,
 * and each armed timeout stays in isolated-vm's timer thread until it is due (see guest-timers.ts).
 */
export interface GuestEntries {
  /** Completes a guest `fetch` (`dispatch("settle", ...)`). */
  settle(id: number, ok: boolean, value: unknown): Promise<unknown>;
  /** Runs the guest's due timers (`dispatch("tick")`); answers the delay to the next, or -1. */
  tick(): Promise<unknown>;
}

/** A limit of the run reached outside the guest's own code; the run ends with this code. */
export class RunLimitError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const LOG_KINDS = new Set<string>(["console.log", "console.error", "console.warn", "console.info", "console.debug"]);
/** Room for the guest's "… [N more characters]" note after a cut console line. */
const CUT_NOTE = 64;

export function timerLimitMessage(max: number): string {
  return `the run fired more than ${max} timer callbacks (setTimeout, setInterval, setImmediate), the limit per run`;
}

export interface HostBridgeOptions {
  limits: ResolvedLimits;
  fetch: HostFetch;
  db: Record<string, unknown>;
  onRespond?: ((response: HttpResponse) => void) | undefined;
  /** Told when settling into the guest fails (the isolate died or timed out meanwhile). */
  onFault: (err: unknown) => void;
}

/** What the guest hands over when a run ends (guest-component.ts `outputs`), not yet checked. */
export interface GuestOutputs {
  error: unknown;
  logs: unknown;
  droppedLogs: unknown;
  emits: unknown;
  db: unknown;
  /** The component did not load: the context must not be used again. */
  discard: unknown;
}

export class HostBridge {
  readonly emits: Emit[] = [];
  readonly logs: LogEntry[] = [];
  responded = false;
  dbChanged = false;
  private droppedLogs = 0;
  private emittedBytes = 0;
  private dbWrittenBytes = 0;
  private fetches = 0;
  /** Fetches of the run in flight, those waiting for one of them to end, and the body bytes received. */
  private fetchesInFlight = 0;
  private readonly fetchQueue: (() => void)[] = [];
  private fetchedBytes = 0;
  /** Bytes the fetches in flight may still receive (each reserves its largest body up front). */
  private reservedBytes = 0;
  private readonly state = new Map<string, string>();
  private stateBytes = 0;
  /** Made by the first fetch of the run (an AbortController costs more than a trivial run). */
  private abort: AbortController | undefined;
  private entries: GuestEntries | undefined;
  private closed = false;
  /** Made by the run's first timer (most runs set none). */
  private wake: GuestWake | undefined;

  constructor(private readonly opts: HostBridgeOptions) {
    for (const key in opts.db) {
      if (!Object.hasOwn(opts.db, key)) continue;
      const json = JSON.stringify(opts.db[key]);
      if (json === undefined) continue;
      this.state.set(key, json);
      this.stateBytes += key.length + json.length;
    }
  }

  private guestWake(): GuestWake {
    if (this.wake) return this.wake;
    const opts = this.opts;
    const maxFirings = opts.limits.maxTimerFiringsPerRun;
    this.wake = new GuestWake({
      maxTicks: maxFirings,
      tick: async () => this.entries?.tick() ?? -1,
      onLimit: () => opts.onFault(new RunLimitError("TIMER_LIMIT", timerLimitMessage(maxFirings))),
      onFault: opts.onFault,
    });
    return this.wake;
  }

  /** The db state as the guest receives it: `[key, JSON]` pairs. */
  dbEntries(): [string, string][] {
    return this.state.size === 0 ? [] : [...this.state];
  }

  /**
   * Takes what the guest kept during the run, checking each item as if it had crossed at the call
   * (the guest applied the same limits; this holds the line whatever arrives). Answers the message
   * of the first item refused, after which nothing more of the run is taken.
   */
  absorb(out: GuestOutputs): string | undefined {
    try {
      if (Array.isArray(out.logs)) {
        for (const line of out.logs as unknown[]) {
          const [ts, kind, msg] = Array.isArray(line) ? (line as unknown[]) : [];
          this.log(kind, msg, ts);
        }
      }
      this.logsDropped(out.droppedLogs);
      if (Array.isArray(out.emits)) {
        for (const e of out.emits as unknown[]) {
          const [json, meta] = Array.isArray(e) ? (e as unknown[]) : [];
          this.emit(json, meta);
        }
      }
      if (Array.isArray(out.db)) {
        for (const w of out.db as unknown[]) {
          const [key, json] = Array.isArray(w) ? (w as unknown[]) : [];
          this.dbSet(this.dbKey(key), json === null ? undefined : json);
        }
      }
      return undefined;
    } catch (err) {
      return err instanceof Error ? err.message : String(err);
    }
  }

  /** Connects the guest's `dispatch`; until then fetches and timers cannot complete. */
  attach(entries: GuestEntries): void {
    this.entries = entries;
  }

  /** Stops every pending fetch and timer: nothing may call into the guest after the run. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.wake?.close();
    this.abort?.abort();
  }

  /** The db state after the run, or the caller's own object when nothing changed. */
  dbState(): Record<string, unknown> {
    if (!this.dbChanged) return this.opts.db;
    const out: Record<string, unknown> = {};
    for (const [key, json] of this.state) out[key] = JSON.parse(json);
    return out;
  }

  /** The logs, plus one line saying how many were dropped over the limit. */
  logEntries(): LogEntry[] {
    if (this.droppedLogs === 0) return this.logs;
    const note = `[tributary] ${this.droppedLogs} more console lines were dropped (limit ${this.opts.limits.maxLogLinesPerRun} per run)`;
    return [...this.logs, { ts: Date.now(), k: "console.warn", msg: note }];
  }

  /** The guest's synchronous callback during the run (guest-prelude.ts `host`). */
  handle(op: unknown, a: unknown, b: unknown, c: unknown, d: unknown, e: unknown): Reply {
    if (this.closed) return ["err", "the run has ended"];
    try {
      switch (op) {
        case "respond":
          return ["ok", this.respond(a, b, c, d)];
        case "fetch":
          return ["ok", this.startFetch(a, b, c, d, e)];
        case "wake":
          return ["ok", this.guestWake().request(Number(a))];
        default:
          return ["err", "unknown host operation"];
      }
    } catch (err) {
      return ["err", err instanceof Error ? err.message : String(err)];
    }
  }

  private log(kind: unknown, msg: unknown, ts?: unknown): void {
    if (typeof msg !== "string") throw new Error("console: invalid arguments");
    if (this.logs.length >= this.opts.limits.maxLogLinesPerRun) {
      this.droppedLogs++;
      return;
    }
    const max = this.opts.limits.maxLogLineBytes;
    const text = msg.length > max + CUT_NOTE ? `${copyPrefix(msg, max)}… [${msg.length - max} more characters]` : msg;
    const at = typeof ts === "number" && Number.isSafeInteger(ts) ? ts : Date.now();
    this.logs.push({ ts: at, k: LOG_KINDS.has(String(kind)) ? (kind as LogKind) : "console.log", msg: text });
  }

  /** The guest's count of console lines it dropped past the limit (it sends none of them). */
  private logsDropped(count: unknown): void {
    const n = Number(count);
    if (Number.isSafeInteger(n) && n > this.droppedLogs) this.droppedLogs = n;
  }

  /** Records one emit; answers how many bytes of the run's emit budget are left. */
  private emit(json: unknown, metaJson: unknown): number {
    const { maxEmitsPerRun, maxEventBytes } = this.opts.limits;
    if (typeof json !== "string" || typeof metaJson !== "string") throw new Error("$emit: invalid arguments");
    if (metaJson.length > CROSSING_LIMITS.maxEmitMetaLength) throw new Error("$emit: the metadata is too large");
    if (this.emits.length >= maxEmitsPerRun) throw new Error(`$emit: at most ${maxEmitsPerRun} events per run`);
    const bytes = Buffer.byteLength(json);
    if (bytes > maxEventBytes) throw new Error(`$emit: the event is ${bytes} bytes as JSON; the limit is ${maxEventBytes}`);
    // A run may not emit more in total, metadata included, than it could keep in 16 events.
    const budget = maxEventBytes * EMIT_BUDGET_EVENTS;
    const total = bytes + Buffer.byteLength(metaJson);
    if (this.emittedBytes + total > budget) throw new Error(`$emit: a run may emit at most ${budget} bytes (events and metadata as JSON)`);
    const meta = checkEmitMeta(metaJson);
    const event = parseShallow(json, "$emit: the event");
    this.emittedBytes += total;
    this.emits.push({ event, meta });
    return budget - this.emittedBytes;
  }

  private dbKey(key: unknown): string {
    const max = this.opts.limits.maxDbBytes;
    if (typeof key !== "string" || key.length > max) throw new Error(`db: the key is longer than the state limit of ${max} bytes`);
    return key;
  }

  /** Writes one key; answers how many bytes of the run's write budget are left. */
  private dbSet(key: string, json: unknown): number {
    const max = this.opts.limits.maxDbBytes;
    if (json !== undefined && typeof json !== "string") throw new Error("db.set: invalid arguments");
    const old = this.state.get(key);
    const oldBytes = old === undefined ? 0 : key.length + old.length;
    const newBytes = json === undefined ? 0 : key.length + json.length;
    if (newBytes > max || this.stateBytes - oldBytes + newBytes > max) throw new Error(`db.set: the state would exceed ${max} bytes`);
    // Each write is copied out of the isolate: a run may not write more than a few whole states.
    const budget = max * DB_WRITE_BUDGET_STATES;
    const written = Math.max(newBytes, key.length);
    if (this.dbWrittenBytes + written > budget)
      throw new Error(`db.set: a run may write at most ${budget} bytes (keys and values as JSON)`);
    if (json !== undefined) parseShallow(json, "db.set: the value");
    if (json === undefined) this.state.delete(key);
    else this.state.set(key, json);
    this.stateBytes += newBytes - oldBytes;
    this.dbWrittenBytes += written;
    this.dbChanged = true;
    return budget - this.dbWrittenBytes;
  }

  private respond(status: unknown, headersJson: unknown, kind: unknown, data: unknown): void {
    const code = Number(status);
    // The endpoint sends no other status (domain/custom-response.ts): refused here, at the call.
    if (!Number.isInteger(code) || code < MIN_CUSTOM_STATUS || code > MAX_CUSTOM_STATUS) {
      throw new Error(`http.respond: status must be an integer from ${MIN_CUSTOM_STATUS} to ${MAX_CUSTOM_STATUS}`);
    }
    // The first response wins, as in Pipedream; later calls are ignored rather than thrown.
    if (this.responded) return;
    this.responded = true;
    const headers: Record<string, string> = {};
    for (const [k, v] of headerList(headersJson, "http.respond")) headers[k.toLowerCase()] = v;
    let body: string | Buffer = "";
    if (kind === "bytes" && data instanceof Uint8Array) body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    else if (typeof data === "string") body = data;
    if (kind === "json" && headers["content-type"] === undefined) headers["content-type"] = "application/json";
    try {
      this.opts.onRespond?.({ status: code, headers, body });
    } catch {
      // The caller's failure to answer its HTTP request is not the component's error.
    }
  }

  private startFetch(id: unknown, url: unknown, method: unknown, headersJson: unknown, body: unknown): void {
    const max = this.opts.limits.maxFetchesPerRun;
    if (++this.fetches > max) throw new Error(`fetch: at most ${max} requests per run`);
    if (typeof url !== "string" || url.length > CROSSING_LIMITS.maxUrlLength) throw new Error("fetch: the URL is too long");
    const target = url;
    const headers: Record<string, string> = {};
    for (const [k, v] of headerList(headersJson, "fetch")) headers[k] = v;
    this.abort ??= new AbortController();
    const init = {
      method: String(method),
      headers,
      signal: this.abort.signal,
      ...(typeof body === "string" || body instanceof Uint8Array ? { body } : {}),
    };
    const limits = this.opts.limits;
    const go = () => {
      if (this.closed) return;
      this.fetchesInFlight++;
      const left = limits.maxFetchBytesPerRun - this.fetchedBytes - this.reservedBytes;
      const reserved = Math.max(0, Math.min(left, limits.maxFetchResponseBytes));
      this.reservedBytes += reserved;
      const runLimit = `fetch: the run's responses reached ${Math.round(limits.maxFetchBytesPerRun / 2 ** 20)} MB, the limit per run`;
      // The promise chain never throws: a failed fetch rejects in the guest, never in the host.
      Promise.resolve()
        .then(() => {
          if (reserved <= 0) throw new Error(runLimit);
          return this.opts.fetch(target, { ...init, maxBytes: reserved });
        })
        .then(
          (res) => {
            const body = String(res.body);
            this.reservedBytes -= reserved;
            this.fetchedBytes += Math.min(body.length, reserved);
            const pairs = Object.entries(res.headers ?? {}).map(([k, v]) => [k, String(v)]);
            return this.settleGuest(Number(id), true, { status: res.status, statusText: res.statusText ?? "", headers: pairs, body });
          },
          (err: unknown) => {
            this.reservedBytes -= reserved;
            const message = err instanceof Error ? err.message : String(err);
            // A body cut at what was left of the run's budget (less than one fetch's own cap) is
            // the run's limit speaking, not the per-fetch one: say so, not an odd byte count.
            const cutByRun = reserved < limits.maxFetchResponseBytes && /response body exceeds/.test(message);
            return this.settleGuest(Number(id), false, cutByRun ? runLimit : message);
          },
        )
        .finally(() => {
          this.fetchesInFlight--;
          this.fetchQueue.shift()?.();
        });
    };
    // Past maxFetchesInFlightPerRun a fetch waits for one of the run's others to end (the run's
    // time limit bounds the wait): the daemon never buffers more than that many bodies per run.
    if (this.fetchesInFlight < limits.maxFetchesInFlightPerRun) go();
    else this.fetchQueue.push(go);
  }

  private async settleGuest(id: number, ok: boolean, value: unknown): Promise<void> {
    if (this.closed || !this.entries) return;
    try {
      await this.entries.settle(id, ok, value);
    } catch (err) {
      if (!this.closed) this.opts.onFault(err);
    }
  }
}

/** A header list (`[[name, value], ...]` as JSON) from the guest. */
function headerList(json: unknown, what: string): [string, string][] {
  if (typeof json !== "string" || json.length > CROSSING_LIMITS.maxHeadersLength) throw new Error(`${what}: the headers are too large`);
  const list: unknown = JSON.parse(json);
  if (!Array.isArray(list)) throw new Error(`${what}: invalid headers`);
  return list.map((p) => [String((p as unknown[])[0]), String((p as unknown[])[1])]);
}

/**
 * The first `max` characters of `s` as a string of their own: `s.slice()` would keep all of `s`
 * alive for as long as the slice lives.
 */
export function copyPrefix(s: string, max: number): string {
  return Buffer.from(s.slice(0, max), "utf16le").toString("utf16le");
}

const FRIENDLY: Record<string, string> = {
  emit: "$emit",
  dbGet: "db",
  dbSet: "db",
  respond: "http.respond",
  fetch: "fetch",
  wake: "timers",
};

/** The host callback while a component is only loaded to read its metadata: console is dropped. */
export function metadataHostCallback(): ivm.Callback {
  return new ivm.Callback((op: unknown): Reply => {
    if (op === "log" || op === "logsDropped") return ["ok", undefined];
    return ["err", `${FRIENDLY[String(op)] ?? String(op)} is not available while the component is loaded`];
  });
}
