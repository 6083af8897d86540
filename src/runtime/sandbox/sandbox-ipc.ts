import type { HostFetchResponse, HttpResponse, InspectResult, RunRequest, RunResult, SandboxLimits } from "./types.js";

/**
 * The messages between the daemon (sandbox-process.ts) and its sandbox process (sandbox-host.ts),
 * sent over Node's IPC channel with structured-clone serialization. Requests carry an id the
 * daemon chooses; a guest `fetch` is done by the daemon (its network, its SSRF guard) under an id
 * the sandbox process chooses.
 */

/** How the sandbox process sets up its `Sandbox` (sent in the environment, read once at start). */
export interface SandboxHostConfig {
  limits: SandboxLimits;
  maxIsolates?: number | undefined;
  maxIdleIsolates?: number | undefined;
  /** Bytes of compiled code kept by key (RunRequest.codeKey) between runs (compiled-code.ts). */
  codeCacheBytes?: number | undefined;
}

/** The environment variable that carries SandboxHostConfig as JSON. */
export const SANDBOX_HOST_CONFIG_ENV = "TRIBUTARY_SANDBOX_CONFIG";

/**
 * A run as it crosses: the response callback stays with the daemon (`respond` messages), and the
 * compiled code travels apart (`code`), only when the process may not hold it yet.
 */
export type RunRequestData = Omit<RunRequest, "onRespond" | "compiledCode">;

export interface FetchRequestData {
  method: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  maxBytes?: number;
}

/** Daemon → sandbox process. */
export type ToHost = HostMessage | Batch<HostMessage>;

/** Several messages sent in one turn of the event loop, in order (`MessageBatcher`). */
export interface Batch<M> {
  t: "batch";
  msgs: M[];
}

/** One message to the sandbox process. */
export type HostMessage =
  /** `code` absent: the run's `req.codeKey` names code an earlier run brought. */
  | { t: "run"; id: number; req: RunRequestData; respond: boolean; code?: string }
  | { t: "inspect"; id: number; code: string; timeoutMs: number }
  | { t: "fetched"; fid: number; ok: true; res: HostFetchResponse }
  | { t: "fetched"; fid: number; ok: false; message: string }
  | { t: "ping" }
  | { t: "close" };

/** Sandbox process → daemon. */
export type FromHost = DaemonMessage | Batch<DaemonMessage>;

/** One message to the daemon. */
export type DaemonMessage =
  | { t: "ready" }
  | { t: "pong" }
  | { t: "ran"; id: number; result: RunResult }
  | { t: "inspected"; id: number; result: InspectResult }
  /** `refused`: the request was turned away before it started (the process is ending). */
  | { t: "failed"; id: number; message: string; refused?: boolean }
  | { t: "respond"; id: number; response: HttpResponse }
  /** The run came without its code, and the process no longer holds it: send the run again with it. */
  | { t: "needCode"; id: number }
  | { t: "fetch"; fid: number; url: string; init: FetchRequestData }
  | { t: "fetchAbort"; fid: number }
  | { t: "catastrophic"; message: string };

/**
 * Sends the messages of one turn of the event loop as one: a burst of runs (a stream read hands the
 * daemon several at once, and warm runs answer within the turn) costs one serialisation, one write
 * and one parse instead of one per message, which were the sandbox process's largest cost after
 * the runs themselves. A lone message goes as itself. Order is kept.
 */
export class MessageBatcher<M extends { t: string }> {
  private queued: M[] = [];
  private sent: (() => void)[] = [];

  /**
   * `write` hands one message to the channel (Node's `send(msg, undefined, {}, callback)`) and
   * calls `done` once it has; a channel that is closed (it throws) counts as done: the process at
   * its other end is ending, and its exit settles what was owed.
   */
  constructor(private readonly write: (msg: M | Batch<M>, done: () => void) => void) {}

  /** Queues `msg`; resolves once it is handed to the channel. */
  send(msg: M): Promise<void> {
    if (this.queued.length === 0) setImmediate(() => this.flush());
    this.queued.push(msg);
    return new Promise((resolve) => this.sent.push(resolve));
  }

  private flush(): void {
    const msgs = this.queued;
    const sent = this.sent;
    this.queued = [];
    this.sent = [];
    const first = msgs[0];
    if (first === undefined) return;
    const done = () => {
      for (const resolve of sent) resolve();
    };
    try {
      this.write(msgs.length === 1 ? first : { t: "batch", msgs }, done);
    } catch {
      done();
    }
  }
}

/** Calls `handle` with each message of `msg` (a batch or a lone message), in order. */
export function eachMessage<M extends { t: string }>(msg: M | Batch<M>, handle: (m: M) => void): void {
  if (msg.t === "batch") for (const m of (msg as Batch<M>).msgs) handle(m);
  else handle(msg as M);
}
