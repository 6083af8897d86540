import type { Logger } from "../observability/logger.js";

/**
 * isolated-vm's `onCatastrophicError`: V8 lost control of an isolate (an out-of-memory it could not
 * contain, a script that would not terminate) and everything the isolate holds is unrecoverable.
 * isolated-vm's documentation says to log and end the process; the supervisor (systemd, Docker,
 * Kubernetes) starts a fresh one, and whatever was in flight is taken over as after any crash.
 * `exit` is injected so tests can see the call without ending the test runner; the process entry
 * point gives one that shuts down with a deadline and then exits non-zero.
 */
export function exitOnCatastrophicError(logger: Logger, exit: (code: number) => void): (message: string) => void {
  let fired = false;
  return (message) => {
    // Every isolate may report; one exit is enough.
    if (fired) return;
    fired = true;
    logger.fatal({ message }, "isolated-vm lost control of an isolate; ending the process so the supervisor restarts it");
    logger.flush?.();
    exit(1);
  };
}
