import type { Logger } from "../observability/logger.js";
import type { SandboxCrash } from "./sandbox/process-sandbox.js";

/**
 * What follows a fatal error in the sandbox. Component code runs in a sandbox process of its own
 * (sandbox/process-sandbox.ts): when V8 loses control of an isolate there (isolated-vm's
 * catastrophic error) or ends the process on a fatal error, the daemon logs it and carries on with
 * a fresh sandbox process; the sandbox process itself ends with `endProcessNow`.
 */

/** The daemon's log line for a sandbox process that ended other than by close(). */
export function logSandboxCrash(logger: Logger): (crash: SandboxCrash) => void {
  return (crash) => {
    logger.error(
      {
        message: crash.message,
        signal: crash.signal,
        code: crash.code,
        lostRequests: crash.lost,
        stderr: crash.stderr.slice(-1024),
      },
      crash.message === undefined
        ? "the sandbox process crashed (a V8 fatal error); a new one serves the next runs"
        : "V8 lost control of an isolate in the sandbox process (isolated-vm catastrophic error); a new process serves the next runs",
    );
  };
}

/**
 * How the sandbox process ends after a catastrophic error. Not `process.exit()`: isolated-vm parks
 * the isolate's thread for good, and Node's exit waits for it forever (seen with an out-of-memory
 * in an isolate). isolated-vm suggests `process.abort()`; SIGKILL ends the process as surely
 * without leaving a core dump of it behind (any component can cause this, as often as it likes).
 */
export const endProcessNow = (): void => {
  process.kill(process.pid, "SIGKILL");
};
