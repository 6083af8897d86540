import { type ChildProcess, fork } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  type DaemonMessage,
  eachMessage,
  type FetchRequestData,
  type FromHost,
  type HostMessage,
  MessageBatcher,
  SANDBOX_HOST_CONFIG_ENV,
  type SandboxHostConfig,
} from "./sandbox-ipc.js";
import type { HostFetch, HttpResponse, InspectResult, RunError, RunRequest, RunResult } from "./types.js";

/**
 * One sandbox process (sandbox-host.ts) as the daemon sees it: requests go out over the IPC
 * channel and come back as results; the guest's `fetch` calls come back to be done here. When the
 * process ends under a request (a V8 fatal error, or the end that follows isolated-vm's
 * catastrophic error), the request does not wait forever: a run ends with SANDBOX_CRASHED, a
 * metadata read answers LOST so the caller can try a fresh process.
 */

/** How a sandbox process ended, for the daemon's log. */
export interface SandboxCrash {
  /** isolated-vm's message, when the process reported that V8 lost control of an isolate. */
  message?: string;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Requests in flight that failed with the process. */
  lost: number;
  /** The end of what the process wrote to stderr (V8 reports a fatal error there). */
  stderr: string;
}

/** A metadata read the process ended under (or refused because it was restarting). */
export const LOST = Symbol("lost");
/** A run the process turned away before starting it (it was ending): safe to send elsewhere. */
export const REFUSED = Symbol("refused");

export interface SandboxProcessDeps {
  fetch: HostFetch;
  /** The process reported a catastrophic error: it takes no new work and ends once idle. */
  onRetire: () => void;
  /** The process ended; `expected` when it was asked to (close). */
  onExit: (crash: SandboxCrash, expected: boolean) => void;
}

type Pending =
  | { kind: "run"; req: RunRequest; started: number; responded: boolean; resolve: (r: RunResult | typeof REFUSED) => void }
  | { kind: "inspect"; resolve: (r: InspectResult | typeof LOST) => void };

/** A process that has not answered a ping for this long is stuck: it is killed. */
const STUCK_MS = 30_000;
const PING_EVERY_MS = 5_000;
/** After `close`, the time the process has to finish its runs before it is killed. */
const CLOSE_GRACE_MS = 5_000;
const STDERR_KEPT = 4096;
/** Code keys remembered as sent; past it the oldest is forgotten (its code is sent again). */
const MAX_SENT_CODES = 10_000;

export class SandboxProcess {
  /** No new work goes here: it reported a catastrophic error, was closed, or ended. */
  retired = false;
  private readonly child: ChildProcess;
  /** Messages to the process, one write per turn of the event loop. */
  private readonly outbox = new MessageBatcher<HostMessage>((msg, done) => this.child.send(msg, undefined, {}, () => done()));
  private readonly ready: Promise<boolean>;
  private readonly pending = new Map<number, Pending>();
  private readonly fetches = new Map<number, AbortController>();
  private nextId = 1;
  /** Code keys whose code was sent to the process, least recently used first (bounded). */
  private readonly sentCodes = new Set<string>();
  /** Times compiled code crossed to the process (tests, operators' tools). */
  codeTransfers = 0;
  private exited = false;
  private closing = false;
  private catastrophe: string | undefined;
  private stderr = "";
  private lastPong = Date.now();
  private readonly pinger: NodeJS.Timeout;

  constructor(
    config: SandboxHostConfig,
    private readonly deps: SandboxProcessDeps,
  ) {
    const entry = hostEntry();
    this.child = fork(entry.file, [], {
      // A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches the
      // daemon, which closes its children, and not the children, whose exit would read as a crash.
      detached: true,
      cwd: path.dirname(entry.file),
      execArgv: entry.execArgv,
      env: childEnv(config),
      serialization: "advanced",
      stdio: ["ignore", "ignore", "pipe", "ipc"],
    });
    this.child.stderr?.on("data", (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString("utf8")).slice(-STDERR_KEPT);
    });
    let becameReady: (ok: boolean) => void = () => {};
    this.ready = new Promise((resolve) => {
      becameReady = resolve;
    });
    this.child.on("message", (raw: unknown) =>
      eachMessage(raw as FromHost, (msg) => {
        if (msg.t === "ready") becameReady(true);
        else this.receive(msg);
      }),
    );
    this.child.on("error", () => {}); // a failed send or spawn ends in "exit" too
    this.child.once("exit", (code, signal) => {
      becameReady(false);
      this.ended(code, signal);
    });
    this.pinger = setInterval(() => this.ping(), PING_EVERY_MS);
    this.pinger.unref();
  }

  /** The process id (operators' tools and tests). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  async run(req: RunRequest): Promise<RunResult | typeof REFUSED> {
    const started = performance.now();
    if (!(await this.ready)) return failedRun(req, started, "SANDBOX_ERROR", "the sandbox process could not start");
    return new Promise((resolve) => {
      const id = this.nextId++;
      this.pending.set(id, { kind: "run", req, started, responded: false, resolve });
      const key = req.codeKey;
      // The code crosses once per key; should the process have dropped it since, it asks again.
      const known = key !== undefined && this.sentCodes.has(key);
      if (known) {
        this.sentCodes.delete(key);
        this.sentCodes.add(key);
      }
      this.sendRun(id, req, !known);
    });
  }

  private sendRun(id: number, req: RunRequest, withCode: boolean): void {
    const { onRespond, compiledCode, ...data } = req;
    if (withCode) {
      this.codeTransfers++;
      const key = req.codeKey;
      if (key !== undefined) {
        this.sentCodes.delete(key);
        this.sentCodes.add(key);
        if (this.sentCodes.size > MAX_SENT_CODES) this.sentCodes.delete(this.sentCodes.values().next().value as string);
      }
    }
    this.send({ t: "run", id, req: data, respond: onRespond !== undefined, ...(withCode ? { code: compiledCode } : {}) });
  }

  async inspect(code: string, timeoutMs: number): Promise<InspectResult | typeof LOST> {
    // Not the code's fault: an error for the caller (a 500), not a verdict on the component.
    if (!(await this.ready)) throw new Error(`the sandbox process could not start: ${this.stderr.slice(-500)}`);
    return new Promise((resolve) => {
      const id = this.nextId++;
      this.pending.set(id, { kind: "inspect", resolve });
      this.send({ t: "inspect", id, code, timeoutMs });
    });
  }

  /** Runs in progress end with SANDBOX_CLOSED; the process ends, or is killed after a grace. */
  close(): void {
    if (this.closing) return;
    this.closing = true;
    this.retired = true;
    this.send({ t: "close" });
    setTimeout(() => this.child.kill("SIGKILL"), CLOSE_GRACE_MS).unref();
  }

  private send(msg: HostMessage): void {
    if (!this.exited) void this.outbox.send(msg);
  }

  private receive(msg: DaemonMessage): void {
    switch (msg.t) {
      case "pong":
        this.lastPong = Date.now();
        return;
      case "catastrophic":
        this.catastrophe = msg.message;
        this.retired = true;
        this.deps.onRetire();
        return;
      case "fetch":
        this.fetch(msg.fid, msg.url, msg.init);
        return;
      case "fetchAbort":
        this.fetches.get(msg.fid)?.abort();
        return;
      case "respond": {
        const p = this.pending.get(msg.id);
        if (p?.kind !== "run" || p.responded) return;
        p.responded = true;
        const body = msg.response.body;
        const response: HttpResponse = {
          ...msg.response,
          body: typeof body === "string" ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength),
        };
        try {
          p.req.onRespond?.(response);
        } catch {
          // The caller's failure to answer its HTTP request is not the component's error.
        }
        return;
      }
      case "needCode": {
        const p = this.pending.get(msg.id);
        if (p?.kind === "run") this.sendRun(msg.id, p.req, true);
        return;
      }
      case "ran":
      case "inspected":
      case "failed":
        this.settle(msg);
        return;
      case "ready":
        return;
    }
  }

  private settle(msg: Extract<DaemonMessage, { t: "ran" | "inspected" | "failed" }>): void {
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (p.kind === "run") {
      if (msg.t === "ran") p.resolve({ ...msg.result, responded: msg.result.responded || p.responded });
      else if (msg.t === "failed" && msg.refused) {
        // It only refuses while ending: no new work goes here either way.
        this.retired = true;
        p.resolve(REFUSED);
      } else p.resolve(failedRun(p.req, p.started, "SANDBOX_ERROR", msg.t === "failed" ? msg.message : "unexpected answer"));
    } else {
      p.resolve(msg.t === "inspected" ? msg.result : LOST);
    }
  }

  private fetch(fid: number, url: string, init: FetchRequestData): void {
    const abort = new AbortController();
    this.fetches.set(fid, abort);
    Promise.resolve()
      .then(() => this.deps.fetch(url, { ...init, signal: abort.signal }))
      .then(
        (res) =>
          this.send({
            t: "fetched",
            fid,
            ok: true,
            res: { status: res.status, statusText: res.statusText ?? "", headers: res.headers, body: String(res.body) },
          }),
        (err: unknown) => this.send({ t: "fetched", fid, ok: false, message: err instanceof Error ? err.message : String(err) }),
      )
      .finally(() => this.fetches.delete(fid));
  }

  private ping(): void {
    if (this.exited) return;
    if (Date.now() - this.lastPong > STUCK_MS) {
      this.child.kill("SIGKILL");
      return;
    }
    this.send({ t: "ping" });
  }

  private ended(code: number | null, signal: NodeJS.Signals | null): void {
    this.exited = true;
    this.retired = true;
    clearInterval(this.pinger);
    for (const abort of this.fetches.values()) abort.abort();
    const lost = this.pending.size;
    for (const p of this.pending.values()) {
      if (p.kind === "inspect") p.resolve(LOST);
      else if (this.closing)
        p.resolve(failedRun(p.req, p.started, "SANDBOX_CLOSED", "the sandbox was shut down during the run", p.responded));
      else p.resolve(failedRun(p.req, p.started, "SANDBOX_CRASHED", crashMessage(this.catastrophe, signal, code), p.responded));
    }
    this.pending.clear();
    this.deps.onExit(
      { ...(this.catastrophe === undefined ? {} : { message: this.catastrophe }), code, signal, lost, stderr: this.stderr },
      this.closing && this.catastrophe === undefined,
    );
  }
}

function crashMessage(catastrophe: string | undefined, signal: NodeJS.Signals | null, code: number | null): string {
  const how = signal ? `signal ${signal}` : `exit code ${code}`;
  const why = catastrophe
    ? `after V8 lost control of an isolate (${catastrophe})`
    : "on a V8 fatal error, most likely a run exhausting its memory in a way V8 cannot contain";
  return `the sandbox process ended during the run (${how}) ${why}; the run's emits, logs and db writes are lost`;
}

function failedRun(req: RunRequest, started: number, code: string, msg: string, responded = false): RunResult {
  const error: RunError = { code, msg, stack: `Error: ${msg}`, ts: new Date().toISOString() };
  return { emits: [], logs: [], db: req.db, dbChanged: false, error, responded, durationMs: Math.round(performance.now() - started) };
}

/**
 * The sandbox process's script: the compiled .js next to this module in a build, the .ts source
 * (through tsx) when the daemon itself runs from source. isolated-vm needs --no-node-snapshot.
 */
function hostEntry(): { file: string; execArgv: string[] } {
  const fromSource = import.meta.url.endsWith(".ts");
  const file = fileURLToPath(new URL(fromSource ? "./sandbox-host.ts" : "./sandbox-host.js", import.meta.url));
  return { file, execArgv: ["--no-node-snapshot", ...(fromSource ? ["--import", "tsx"] : [])] };
}

/** Only what Node needs: the daemon's secrets (Redis URL, admin token) never reach the process. */
function childEnv(config: SandboxHostConfig): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { [SANDBOX_HOST_CONFIG_ENV]: JSON.stringify(config) };
  for (const k of ["PATH", "HOME", "TMPDIR", "LANG", "TZ", "SYSTEMROOT"]) {
    const v = process.env[k];
    if (v !== undefined) env[k] = v;
  }
  return env;
}
