import { type ChildProcess, spawn } from "node:child_process";

/**
 * redis-server started under a watchdog so that it dies with the daemon. Node has no
 * prctl(PR_SET_PDEATHSIG), and a redis-server child of a SIGKILLed daemon would keep running (and
 * keep its append-only file open) forever. The watchdog is a few lines of POSIX sh between the two:
 *
 * - it reads the password from the first line of its stdin, so the secret is in no argv (`ps`
 *   shows those to every local user) and no environment, and hands it to redis-server as config
 *   on the server's stdin (`redis-server -`);
 * - it sets umask 077, so everything the server writes (append-only files, pid file) is 0600;
 * - it prints the server's pid, then waits for end-of-file on its stdin. The daemon holds the
 *   other end of that pipe and never writes to it again; the kernel closes it when the daemon
 *   exits, however it exits (SIGKILL and OOM kills included), and `close()` closes it on purpose.
 *   End-of-file sends the server SIGTERM (a clean shutdown: the append-only file is fsynced);
 * - it exits with the server's status when the server exits, which is how the daemon learns that
 *   the server died.
 *
 * The server's log goes to the watchdog's stderr, which the daemon keeps reading (a pipe nobody
 * drains would block the server's writes). Once the daemon is gone those writes fail, and
 * redis-server ignores SIGPIPE. The watchdog runs in its own process group (`detached`), so a
 * Ctrl-C meant for the daemon does not stop Redis under it before the daemon's orderly shutdown.
 */
const WATCHDOG = `umask 077
IFS= read -r password || exit 64
exec 3<&0
printf 'requirepass "%s"\\n' "$password" | "$@" >&2 3<&- &
server=$!
echo "$server"
{ while read -r _; do :; done; kill -TERM "$server" 2>/dev/null; } <&3 3<&- &
watcher=$!
exec 3<&- 0</dev/null
wait "$server"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
`;

/** Lines of the server's log kept for error messages. */
const LOG_LINES = 30;

export interface WatchedServer {
  /** The watchdog's pid (the server's parent). */
  readonly watchdogPid: number;
  /** The server's pid, once the watchdog has printed it. */
  readonly serverPid: Promise<number>;
  /** Resolves with a description of how the watchdog (so the server) exited. */
  readonly exited: Promise<string>;
  hasExited(): boolean;
  /** The last lines the server logged. */
  log(): string;
  /** Asks for a clean shutdown (end-of-file to the watchdog); SIGKILL after `graceMs`. Idempotent. */
  stop(graceMs: number): Promise<void>;
}

/** Starts `redis-server - <args>` under the watchdog with `password` as its `requirepass`. */
export function spawnWatchedServer(args: readonly string[], password: string): WatchedServer {
  if (!/^[A-Za-z0-9]+$/.test(password)) throw new Error("the embedded Redis password must be alphanumeric");
  const child: ChildProcess = spawn("sh", ["-c", WATCHDOG, "tributary-redis-watchdog", "redis-server", "-", ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    detached: true,
  });
  // A failed spawn (no sh) is reported below through the missing pid; without a listener the
  // 'error' event that follows would crash the process.
  child.on("error", () => {});
  if (child.pid === undefined || !child.stdin || !child.stdout || !child.stderr) throw new Error("could not start sh for redis-server");
  const watchdogPid = child.pid;
  const stdin = child.stdin;
  // The watchdog may be gone before we write or end (the server failed to start): not an error here.
  stdin.on("error", () => {});
  stdin.write(`${password}\n`);

  const lines: string[] = [];
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk: string) => {
    for (const line of chunk.split("\n")) if (line.trim() !== "") lines.push(line);
    if (lines.length > LOG_LINES) lines.splice(0, lines.length - LOG_LINES);
  });

  let exitedWith: string | undefined;
  const exited = new Promise<string>((resolve) => {
    child.once("exit", (code, signal) => {
      exitedWith = signal ? `killed by ${signal}` : code !== null && code > 128 ? `killed by signal ${code - 128}` : `exit code ${code}`;
      resolve(exitedWith);
    });
  });
  const serverPid = new Promise<number>((resolve, reject) => {
    let out = "";
    child.stdout?.setEncoding("utf8");
    child.stdout?.on("data", (chunk: string) => {
      out += chunk;
      const pid = Number(out.split("\n")[0]);
      if (out.includes("\n") && Number.isInteger(pid) && pid > 0) resolve(pid);
    });
    void exited.then(() => reject(new Error("redis-server exited before it started")));
  });
  serverPid.catch(() => {});

  let stopping: Promise<void> | undefined;
  return {
    watchdogPid,
    serverPid,
    exited,
    hasExited: () => exitedWith !== undefined,
    log: () => lines.join("\n"),
    stop(graceMs) {
      stopping ??= (async () => {
        if (exitedWith !== undefined) return;
        stdin.end();
        let timer: NodeJS.Timeout | undefined;
        const forced = new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            // The server ignored SIGTERM past the grace period: kill it, then its watchdog.
            void serverPid.then((pid) => killQuietly(pid, "SIGKILL"));
            killQuietly(watchdogPid, "SIGKILL");
            resolve();
          }, graceMs);
        });
        await Promise.race([exited, forced]);
        clearTimeout(timer);
        await exited;
      })();
      return stopping;
    },
  };
}

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}
