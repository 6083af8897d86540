import ivm from "isolated-vm";
import type { Emit, EmitMeta, HostFetch, HttpResponse, LogEntry, LogKind, ResolvedLimits } from "./types.js";

/**
 * The host half of one run: the single synchronous callback the guest prelude calls for `console`,
 * `$emit`, `db`, `http.respond`, `fetch` and timers, and the state it collects. Everything that
 * arrives is a string or a structured-clone copy made by isolated-vm; everything this module keeps
 * is bounded by the run's limits, since an isolate's memory limit does not bound the host's.
 *
 * Replies are `["ok", value]` or `["err", message]` (the guest throws the message), so no host
 * exception, and no host stack trace, reaches component code.
 */

type Reply = readonly ["ok", unknown] | readonly ["err", string];
/** Completes a guest `fetch` or fires a guest timer (`dispatch("settle", ...)` in the guest). */
export type Settle = (id: number, ok: boolean, value: unknown) => Promise<unknown>;

const LOG_KINDS = new Set<string>(["console.log", "console.error", "console.warn", "console.info", "console.debug"]);
const MAX_TIMERS = 1000;
const MAX_URL_LENGTH = 16 * 1024;

export interface HostBridgeOptions {
  limits: ResolvedLimits;
  fetch: HostFetch;
  db: Record<string, unknown>;
  onRespond?: ((response: HttpResponse) => void) | undefined;
  /** Told when settling into the guest fails (the isolate died or timed out meanwhile). */
  onFault: (err: unknown) => void;
}

export class HostBridge {
  readonly emits: Emit[] = [];
  readonly logs: LogEntry[] = [];
  readonly callback: ivm.Callback;
  responded = false;
  dbChanged = false;
  private droppedLogs = 0;
  private emittedBytes = 0;
  private fetches = 0;
  private readonly state = new Map<string, string>();
  private stateBytes = 0;
  private readonly timers = new Map<number, NodeJS.Timeout>();
  private readonly abort = new AbortController();
  private settle: Settle | undefined;
  private closed = false;

  constructor(private readonly opts: HostBridgeOptions) {
    for (const [key, value] of Object.entries(opts.db)) {
      const json = JSON.stringify(value);
      if (json === undefined) continue;
      this.state.set(key, json);
      this.stateBytes += key.length + json.length;
    }
    this.callback = new ivm.Callback((op: unknown, a: unknown, b: unknown, c: unknown, d: unknown, e: unknown) =>
      this.handle(op, a, b, c, d, e),
    );
  }

  /** Connects the guest's `dispatch`; until then fetches and timers cannot complete. */
  attach(settle: Settle): void {
    this.settle = settle;
  }

  /** Stops every pending fetch and timer: nothing may call into the guest after the run. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    this.abort.abort();
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

  private handle(op: unknown, a: unknown, b: unknown, c: unknown, d: unknown, e: unknown): Reply {
    try {
      switch (op) {
        case "log":
          return ["ok", this.log(a, b)];
        case "emit":
          return ["ok", this.emit(a, b)];
        case "dbGet":
          return ["ok", this.state.get(String(a))];
        case "dbSet":
          return ["ok", this.dbSet(String(a), b)];
        case "respond":
          return ["ok", this.respond(a, b, c, d)];
        case "fetch":
          return ["ok", this.startFetch(a, b, c, d, e)];
        case "timer":
          return ["ok", this.startTimer(Number(a), Number(b))];
        case "clearTimer":
          return ["ok", this.clearTimer(Number(a))];
        default:
          return ["err", "unknown host operation"];
      }
    } catch (err) {
      return ["err", err instanceof Error ? err.message : String(err)];
    }
  }

  private log(kind: unknown, msg: unknown): void {
    if (this.logs.length >= this.opts.limits.maxLogLinesPerRun) {
      this.droppedLogs++;
      return;
    }
    const max = this.opts.limits.maxLogLineBytes;
    let text = String(msg);
    if (text.length > max) text = `${text.slice(0, max)}… [${text.length - max} more characters]`;
    this.logs.push({ ts: Date.now(), k: LOG_KINDS.has(String(kind)) ? (kind as LogKind) : "console.log", msg: text });
  }

  private emit(json: unknown, metaJson: unknown): void {
    const { maxEmitsPerRun, maxEventBytes } = this.opts.limits;
    if (typeof json !== "string" || typeof metaJson !== "string") throw new Error("$emit: invalid arguments");
    if (this.emits.length >= maxEmitsPerRun) throw new Error(`$emit: at most ${maxEmitsPerRun} events per run`);
    const bytes = Buffer.byteLength(json);
    if (bytes > maxEventBytes) throw new Error(`$emit: the event is ${bytes} bytes as JSON; the limit is ${maxEventBytes}`);
    // A run may not emit more in total than it could keep in its maximum number of events.
    if (this.emittedBytes + bytes > maxEventBytes * 16) throw new Error("$emit: this run has emitted too much data");
    this.emittedBytes += bytes;
    this.emits.push({ event: JSON.parse(json), meta: normalizeMeta(JSON.parse(metaJson)) });
  }

  private dbSet(key: string, json: unknown): void {
    const old = this.state.get(key);
    const oldBytes = old === undefined ? 0 : key.length + old.length;
    const newBytes = typeof json === "string" ? key.length + json.length : 0;
    if (this.stateBytes - oldBytes + newBytes > this.opts.limits.maxDbBytes) {
      throw new Error(`db.set: the state would exceed ${this.opts.limits.maxDbBytes} bytes`);
    }
    if (typeof json === "string") this.state.set(key, json);
    else this.state.delete(key);
    this.stateBytes += newBytes - oldBytes;
    this.dbChanged = true;
  }

  private respond(status: unknown, headersJson: unknown, kind: unknown, data: unknown): void {
    const code = Number(status);
    if (!Number.isInteger(code) || code < 100 || code > 599) throw new Error("http.respond: status must be an integer from 100 to 599");
    // The first response wins, as in Pipedream; later calls are ignored rather than thrown.
    if (this.responded) return;
    this.responded = true;
    const headers: Record<string, string> = {};
    for (const [k, v] of JSON.parse(String(headersJson)) as [string, string][]) headers[k.toLowerCase()] = v;
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
    const target = String(url);
    if (target.length > MAX_URL_LENGTH) throw new Error("fetch: the URL is too long");
    const headers: Record<string, string> = {};
    for (const [k, v] of JSON.parse(String(headersJson)) as [string, string][]) headers[k] = v;
    const init = {
      method: String(method),
      headers,
      signal: this.abort.signal,
      ...(typeof body === "string" || body instanceof Uint8Array ? { body } : {}),
    };
    // The promise chain never throws: a failed fetch rejects in the guest, never in the host.
    Promise.resolve()
      .then(() => this.opts.fetch(target, init))
      .then(
        (res) => {
          const pairs = Object.entries(res.headers ?? {}).map(([k, v]) => [k, String(v)]);
          return this.settleGuest(Number(id), true, {
            status: res.status,
            statusText: res.statusText ?? "",
            headers: pairs,
            body: String(res.body),
          });
        },
        (err: unknown) => this.settleGuest(Number(id), false, err instanceof Error ? err.message : String(err)),
      );
  }

  private startTimer(id: number, delayMs: number): void {
    if (this.closed) return;
    if (this.timers.size >= MAX_TIMERS) throw new Error(`timers: at most ${MAX_TIMERS} pending timers per run`);
    const t = setTimeout(
      () => {
        this.timers.delete(id);
        void this.settleGuest(id, true, undefined);
      },
      Math.min(Math.max(0, delayMs || 0), 2 ** 31 - 1),
    );
    t.unref();
    this.timers.set(id, t);
  }

  private clearTimer(id: number): void {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
  }

  private async settleGuest(id: number, ok: boolean, value: unknown): Promise<void> {
    if (this.closed || !this.settle) return;
    try {
      await this.settle(id, ok, value);
    } catch (err) {
      if (!this.closed) this.opts.onFault(err);
    }
  }
}

/** Keeps the documented metadata fields, coerced to their types; drops what cannot be coerced. */
function normalizeMeta(raw: unknown): EmitMeta {
  const meta: EmitMeta = {};
  if (typeof raw !== "object" || raw === null) return meta;
  const m = raw as Record<string, unknown>;
  if (typeof m.id === "string" || (typeof m.id === "number" && Number.isFinite(m.id))) meta.id = m.id;
  else if (m.id !== undefined) meta.id = JSON.stringify(m.id);
  if (m.name !== undefined && m.name !== "") meta.name = String(m.name);
  if (m.summary !== undefined) meta.summary = typeof m.summary === "string" ? m.summary : JSON.stringify(m.summary);
  if (typeof m.ts === "number" && Number.isFinite(m.ts)) meta.ts = m.ts;
  else if (typeof m.ts === "string" && Number.isFinite(Date.parse(m.ts))) meta.ts = Date.parse(m.ts);
  return meta;
}

const FRIENDLY: Record<string, string> = {
  emit: "$emit",
  dbGet: "db",
  dbSet: "db",
  respond: "http.respond",
  fetch: "fetch",
  timer: "timers",
};

/** The host callback while a component is only loaded to read its metadata: console is dropped. */
export function metadataHostCallback(): ivm.Callback {
  return new ivm.Callback((op: unknown): Reply => {
    if (op === "log" || op === "clearTimer") return ["ok", undefined];
    return ["err", `${FRIENDLY[String(op)] ?? String(op)} is not available while the component is loaded`];
  });
}
