import type { Logger } from "../observability/logger.js";

/**
 * isolated-vm's `onCatastrophicError`: V8 lost control of an isolate (an out-of-memory it could not
 * contain, a script that would not terminate) and everything the isolate holds is unrecoverable.
 * isolated-vm's documentation says to log, stop serving, finish outstanding work and end the
 * process with `process.abort()`; the supervisor (systemd, Docker, Kubernetes) starts a fresh one,
 * and whatever was in flight is taken over as after any crash.
 *
 * `end` is injected: main.ts drains and aborts, tests observe the call without ending the runner.
 */
export function exitOnCatastrophicError(logger: Logger, end: () => void): (message: string) => void {
  let fired = false;
  return (message) => {
    // Every isolate may report; one ending is enough.
    if (fired) return;
    fired = true;
    logger.fatal({ message }, "isolated-vm lost control of an isolate; ending the process so the supervisor restarts it");
    logger.flush?.();
    end();
  };
}

/**
 * The default ending. Not `process.exit()`: after a catastrophic error isolated-vm parks the
 * isolate's thread for good, and Node's exit waits for it forever (seen with an out-of-memory in an
 * isolate). `abort()` ends the process regardless.
 */
export const abortProcess = (): void => process.abort();
