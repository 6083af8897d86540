import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { freePort } from "../../../src/redis/embedded.js";
import { processAlive } from "../../../src/redis/host-process.js";
import { client } from "../../helpers/daemon.js";
import { type DaemonChild, killAll, spawnDaemon, waitForReady } from "../../helpers/process.js";
import { waitFor } from "../../helpers/receiver.js";

/**
 * The embedded redis-server (no REDIS_URL) as an operator runs it: the daemon is a child process
 * with DATA_DIR in a temporary directory, killed with real signals. Its server must die with it,
 * never run twice on one append-only file, require a password, keep its files to the owner, and
 * come back when it dies under a running daemon.
 */

const ADMIN_TOKEN = `admin-${randomBytes(8).toString("hex")}`;
const dirs: string[] = [];

afterEach(async () => {
  await killAll();
});

afterAll(async () => {
  // A server whose daemon was SIGKILLed may take a moment to finish its shutdown; one still running
  // after that (a failed test) is ours, named by the pid file in our temporary directory.
  for (const dir of dirs) {
    const pid = serverPid(dir);
    if (pid !== undefined && processAlive(pid)) {
      await waitFor(() => !processAlive(pid), { timeoutMs: 10_000, what: `redis-server ${pid} to stop` }).catch(() =>
        process.kill(pid, "SIGKILL"),
      );
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

function tempDataDir(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "tributary-embedded-"));
  dirs.push(dir);
  return dir;
}

const redisDir = (dataDir: string) => path.join(dataDir, "redis");

/** The pid in redis.pid (written by redis-server itself), if any. */
function serverPid(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(path.join(redisDir(dataDir), "redis.pid"), "utf8").trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The parent pid of `pid`, from /proc (Linux). */
function parentPid(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return undefined;
  }
}

/** The processes whose parent is `pid`. */
function childrenOf(pid: number): number[] {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .map(Number)
    .filter((p) => parentPid(p) === pid);
}

async function startDaemon(name: string, dataDir: string): Promise<DaemonChild> {
  const d = spawnDaemon(name, { DATA_DIR: dataDir, ADMIN_TOKEN, PORT: String(await freePort()), HOST: "127.0.0.1", LOG_LEVEL: "warn" });
  await waitForReady(d, 60_000);
  return d;
}

/** A user created through the admin API; its key is how later steps tell the old data is there. */
async function createUser(d: DaemonChild): Promise<string> {
  const tag = randomBytes(4).toString("hex");
  const res = await client(d.url, ADMIN_TOKEN).post("/admin/users", {
    json: { username: `e${tag}`, email: `e${tag}@example.com`, plan: "free" },
  });
  expect(res.status, res.text).toBe(201);
  return res.body.data.api_key as string;
}

async function expectUserServed(d: DaemonChild, key: string): Promise<void> {
  const me = await client(d.url, key).get("/v1/users/me");
  expect(me.status, `${me.text}\n${d.logs()}`).toBe(200);
}

/** What the server answers a client that has not authenticated. */
function unauthenticatedPing(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: "127.0.0.1" }, () => sock.write("PING\r\n"));
    sock.setTimeout(5000, () => sock.destroy(new Error("no answer")));
    sock.once("data", (d) => {
      sock.destroy();
      resolve(d.toString().trim());
    });
    sock.once("error", reject);
  });
}

const mode = (p: string) => statSync(p).mode & 0o777;

describe("embedded redis-server lifecycle", () => {
  it("stops the embedded redis-server when its daemon is SIGKILLed; a daemon restarted on the same DATA_DIR serves the old data", async () => {
    const dataDir = tempDataDir();
    const first = await startDaemon("daemon-1", dataDir);
    const key = await createUser(first);
    const pid = serverPid(dataDir);
    expect(pid).toBeDefined();
    await first.kill("SIGKILL");
    await waitFor(() => !processAlive(pid as number), {
      timeoutMs: 15_000,
      intervalMs: 50,
      what: `redis-server ${pid} to stop after its daemon died`,
    });

    const second = await startDaemon("daemon-2", dataDir);
    expect(serverPid(dataDir)).not.toBe(pid);
    await expectUserServed(second, key);
  }, 120_000);

  it("refuses a second daemon on a DATA_DIR in use with one line naming the directory, and leaves the first one serving", async () => {
    const dataDir = tempDataDir();
    const first = await startDaemon("daemon-1", dataDir);
    const key = await createUser(first);
    const pid = serverPid(dataDir);
    const second = spawnDaemon("daemon-2", {
      DATA_DIR: dataDir,
      ADMIN_TOKEN,
      PORT: String(await freePort()),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
    });
    const exit = await Promise.race([second.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000))]);
    expect(exit?.code, second.logs()).toBe(1);
    const lines = second.logs().split("\n");
    expect(lines, second.logs()).toHaveLength(1);
    expect(lines[0]).toContain(redisDir(dataDir));
    expect(lines[0]).toMatch(/in use by another tributary process \(pid \d+\)/);
    expect(serverPid(dataDir)).toBe(pid);
    expect(processAlive(pid as number)).toBe(true);
    await expectUserServed(first, key);
  }, 120_000);

  it("stops a redis-server left running by a daemon killed together with its watchdog, then serves the old data", async () => {
    const dataDir = tempDataDir();
    const first = await startDaemon("daemon-1", dataDir);
    const key = await createUser(first);
    const pid = serverPid(dataDir) as number;
    // The daemon is frozen first: a running daemon that sees its watchdog die closes its end of the
    // watchdog's pipe (Node destroys a dead child's stdin), and the watchdog's watcher, if still
    // alive, answers that end-of-file with SIGTERM to the server. Then the watcher (the watchdog's
    // other child, which waits for that end-of-file), then the watchdog (the server's parent): with
    // both gone, nothing stops the server when the daemon dies.
    const watchdog = parentPid(pid) as number;
    expect(watchdog).not.toBe(first.pid);
    process.kill(first.pid, "SIGSTOP");
    for (const p of [...childrenOf(watchdog).filter((c) => c !== pid), watchdog]) process.kill(p, "SIGKILL");
    await first.kill("SIGKILL");
    await new Promise((r) => setTimeout(r, 500));
    expect(processAlive(pid), "the orphaned server should still be running").toBe(true);

    const second = await startDaemon("daemon-2", dataDir);
    expect(processAlive(pid)).toBe(false);
    expect(serverPid(dataDir)).not.toBe(pid);
    expect(second.logs()).toContain("stopped an embedded redis-server left running by a previous tributary");
    await expectUserServed(second, key);
  }, 120_000);
});

describe("embedded redis-server secrets", () => {
  it("requires a password (NOAUTH without one) and keeps its directory 0700 and its files 0600", async () => {
    const dataDir = tempDataDir();
    // As a version that did not care left it: a readable directory and append-only file.
    mkdirSync(redisDir(dataDir), { recursive: true });
    chmodSync(redisDir(dataDir), 0o755);
    writeFileSync(path.join(redisDir(dataDir), "left-over.aof"), "", { mode: 0o644 });
    chmodSync(path.join(redisDir(dataDir), "left-over.aof"), 0o644);

    const d = await startDaemon("daemon", dataDir);
    const key = await createUser(d);
    const emit = await client(d.url, key).post("/v1/workflows/p_secret/events", { json: { event: { secret: true } } });
    expect(emit.status, emit.text).toBe(202);

    const dir = redisDir(dataDir);
    expect(mode(dir).toString(8)).toBe("700");
    const files: string[] = [];
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        expect({ p, mode: mode(p).toString(8) }).toEqual({ p, mode: "700" });
        for (const inner of readdirSync(p)) files.push(path.join(p, inner));
      } else files.push(p);
    }
    expect(files.map((f) => path.basename(f))).toEqual(expect.arrayContaining(["redis.url", "redis.pid", "owner.lock", "left-over.aof"]));
    expect(files.some((f) => f.endsWith(".aof") && f.includes("appendonlydir"))).toBe(true);
    for (const f of files) expect({ f, mode: mode(f).toString(8) }).toEqual({ f, mode: "600" });

    const url = new URL(readFileSync(path.join(dir, "redis.url"), "utf8").trim());
    expect(url.password.length).toBeGreaterThanOrEqual(32);
    expect(await unauthenticatedPing(Number(url.port))).toMatch(/^-NOAUTH/);
    // The password is in no command line another local user could read, nor in the daemon's log.
    const pid = serverPid(dataDir) as number;
    for (const p of [pid, parentPid(pid) as number]) expect(readFileSync(`/proc/${p}/cmdline`, "utf8")).not.toContain(url.password);
    expect(d.logs()).not.toContain(url.password);
  }, 120_000);
});

describe("a dead embedded redis-server", () => {
  it("is restarted: the same daemon serves the old data again after the server is SIGKILLed", async () => {
    const dataDir = tempDataDir();
    const d = await startDaemon("daemon", dataDir);
    const key = await createUser(d);
    const pid = serverPid(dataDir) as number;
    process.kill(pid, "SIGKILL");
    await waitFor(
      async () => {
        if (d.hasExited()) throw new Error(`the daemon exited:\n${d.logs()}`);
        const now = serverPid(dataDir);
        if (now === undefined || now === pid || !processAlive(now)) return false;
        return (await fetch(`${d.url}/readyz`).catch(() => undefined))?.status === 200;
      },
      { timeoutMs: 30_000, intervalMs: 100, what: "a restarted redis-server and /readyz 200" },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${d.logs()}`);
    });
    await expectUserServed(d, key);
    const emit = await client(d.url, key).post("/v1/workflows/p_after/events", { json: { event: { n: 1 } } });
    expect(emit.status, emit.text).toBe(202);
  }, 120_000);

  it("makes the daemon exit 1 when the server keeps dying", async () => {
    const dataDir = tempDataDir();
    const d = await startDaemon("daemon", dataDir);
    // Five restarts a minute are allowed; the sixth death gives up.
    let last: number | undefined;
    for (let kills = 0; kills < 6 && !d.hasExited(); kills++) {
      const pid = await waitFor(
        () => {
          const now = serverPid(dataDir);
          return now !== undefined && now !== last && processAlive(now) ? now : d.hasExited();
        },
        // Generous: a restart waits up to its start time-out (60 s with a data dir) for the new
        // server to answer, and a CI machine with a busy core once took longer than 30 s.
        { timeoutMs: 75_000, intervalMs: 50, what: `a running redis-server after ${kills} kills` },
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${d.logs()}`);
      });
      if (pid === true) break;
      last = pid;
      process.kill(pid, "SIGKILL");
    }
    const exit = await Promise.race([d.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 75_000))]);
    expect(exit?.code, d.logs()).toBe(1);
    expect(d.logs()).toContain("giving up on the embedded redis-server");
  }, 540_000);
});
