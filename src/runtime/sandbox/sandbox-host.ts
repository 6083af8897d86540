import { CompiledCodeCache } from "../compiled-code.js";
import { endProcessNow } from "../fatal.js";
import { Sandbox } from "./sandbox.js";
import {
  type DaemonMessage,
  eachMessage,
  type HostMessage,
  MessageBatcher,
  SANDBOX_HOST_CONFIG_ENV,
  type SandboxHostConfig,
  type ToHost,
} from "./sandbox-ipc.js";
import type { HostFetch, HostFetchResponse, HttpResponse } from "./types.js";

/**
 * The sandbox process: the entry point the daemon starts (sandbox-process.ts) to run component
 * code in isolated-vm isolates away from its own process. It serves runs and metadata reads over
 * the IPC channel; the network for the guest's `fetch` stays the daemon's.
 *
 * Why a process of its own: V8 cannot contain every out-of-memory. A hash table (an object used as
 * a dictionary, a Map, a Set) grown until the memory runs out fails to double in one allocation,
 * and isolated-vm can then only report a catastrophic error, after which the process must end. Here
 * that ends this process, not the daemon: the run in the lost isolate ends at once with an error
 * (Sandbox), the runs in the other isolates finish, the daemon is told (it sends new work to a
 * fresh sandbox process at once), and this process ends (fatal.ts, endProcessNow). A V8 fatal
 * error ends it on the spot; the daemon then fails what was in flight here.
 *
 * Started as a script; nothing here is meant to be imported.
 */

/** Past this, a process draining after a catastrophic error ends even with work outstanding. */
const DRAIN_GRACE_MS = 5000;

function readConfig(): SandboxHostConfig {
  const raw = process.env[SANDBOX_HOST_CONFIG_ENV];
  if (raw === undefined || typeof process.send !== "function") {
    process.stderr.write("sandbox-host: start me through ProcessSandbox (an IPC channel and a configuration are needed)\n");
    process.exit(2);
  }
  return JSON.parse(raw) as SandboxHostConfig;
}

const config = readConfig();

let inFlight = 0;
let draining = false;
let closing = false;
let nextFetchId = 1;
const fetches = new Map<number, { resolve: (r: HostFetchResponse) => void; reject: (err: Error) => void }>();
/** Compiled code by key: the daemon sends a code once, and later runs of it name it only. */
const codes = new CompiledCodeCache(config.codeCacheBytes);

const outbox = new MessageBatcher<DaemonMessage>((msg, done) => process.send?.(msg, undefined, {}, () => done()));

/** Sends a message; resolves once it is handed to the channel (the daemon may be gone: ignored). */
function send(msg: DaemonMessage): Promise<void> {
  return outbox.send(msg);
}

/** The guest's fetch, done by the daemon. */
const fetchThroughDaemon: HostFetch = (url, init) =>
  new Promise((resolve, reject) => {
    const fid = nextFetchId++;
    fetches.set(fid, { resolve, reject });
    init.signal.addEventListener(
      "abort",
      () => {
        if (!fetches.delete(fid)) return;
        void send({ t: "fetchAbort", fid });
        reject(new Error("the request was aborted"));
      },
      { once: true },
    );
    void send({
      t: "fetch",
      fid,
      url,
      init: {
        method: init.method,
        headers: init.headers,
        ...(init.body === undefined ? {} : { body: init.body }),
        ...(init.maxBytes === undefined ? {} : { maxBytes: init.maxBytes }),
      },
    });
  });

const sandbox = new Sandbox(config.limits, {
  fetch: fetchThroughDaemon,
  maxIsolates: config.maxIsolates,
  maxIdleIsolates: config.maxIdleIsolates,
  onCatastrophicError: (message) => {
    if (draining) return;
    draining = true;
    // isolated-vm parked the isolate's thread for good: finish what the other isolates run, then end
    // (once the daemon has been told: messages leave at the end of the turn, MessageBatcher).
    setTimeout(endProcessNow, config.limits.timeoutMs + DRAIN_GRACE_MS);
    void send({ t: "catastrophic", message }).then(endIfIdle);
  },
});

function endIfIdle(): void {
  if (inFlight > 0) return;
  // Not process.exit(): it would wait forever for the parked thread.
  if (draining) endProcessNow();
  else if (closing) process.exit(0);
}

/** Runs one request, sends its answer, and ends the process if it was the last one owed. */
async function serve(id: number, work: () => Promise<DaemonMessage>): Promise<void> {
  inFlight++;
  let answer: DaemonMessage;
  try {
    answer = await work();
  } catch (err) {
    answer = { t: "failed", id, message: err instanceof Error ? err.message : String(err) };
  }
  await send(answer);
  inFlight--;
  endIfIdle();
}

process.on("message", (raw: unknown) => eachMessage(raw as ToHost, receive));

function receive(msg: HostMessage): void {
  switch (msg.t) {
    case "run":
    case "inspect":
      if (draining || closing) {
        void send({ t: "failed", id: msg.id, message: "the sandbox process is restarting", refused: true });
        return;
      }
      if (msg.t === "run") {
        const { id, req, respond } = msg;
        let compiledCode = msg.code;
        if (compiledCode === undefined) {
          compiledCode = req.codeKey === undefined ? undefined : codes.peek(req.codeKey);
          if (compiledCode === undefined) {
            void send({ t: "needCode", id });
            return;
          }
        } else if (req.codeKey !== undefined) {
          codes.keep(req.codeKey, compiledCode);
        }
        const code = compiledCode;
        const onRespond = respond ? (response: HttpResponse) => void send({ t: "respond", id, response }) : undefined;
        void serve(id, async () => ({
          t: "ran",
          id,
          result: await sandbox.run({ ...req, compiledCode: code, ...(onRespond ? { onRespond } : {}) }),
        }));
      } else {
        const { id, code, timeoutMs } = msg;
        void serve(id, async () => ({ t: "inspected", id, result: await sandbox.inspect(code, timeoutMs) }));
      }
      return;
    case "fetched": {
      const f = fetches.get(msg.fid);
      if (!f) return;
      fetches.delete(msg.fid);
      if (msg.ok) f.resolve(msg.res);
      else f.reject(new Error(msg.message));
      return;
    }
    case "ping":
      void send({ t: "pong" });
      return;
    case "close":
      closing = true;
      sandbox.close();
      endIfIdle();
      return;
  }
}

// The daemon ends this process (a close message, its own exit, SIGKILL): a SIGINT or SIGTERM sent
// to every process of a group or container (a supervisor's stop) is the daemon's to answer, and an
// exit on it would end the runs in flight as crashes before the daemon's drain.
process.on("SIGINT", () => {});
process.on("SIGTERM", () => {});

// The daemon went away: nothing here is owed to anyone.
process.on("disconnect", () => {
  sandbox.close();
  if (draining) endProcessNow();
  else process.exit(0);
});

void send({ t: "ready" });
