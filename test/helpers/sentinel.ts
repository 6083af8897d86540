import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { freePort, redisAnswersPing } from "../../src/redis/embedded.js";
import { onRedisNode, type RedisNodeProcess, spawnRedisNode } from "./redis-node.js";
import { waitFor } from "./wait.js";

/**
 * A Redis Sentinel deployment on loopback for tests, from the `redis-server` on PATH (sentinel
 * mode is `redis-server <conf> --sentinel`; no redis-sentinel package needed): one master, its
 * replicas and the sentinels watching them, every node password-protected, each on a port picked
 * at run time, config files in a temporary folder. Every process is SIGKILLed by `stop()` (and by
 * a process-exit hook if the test worker goes away first).
 */

export interface NodeProcess extends RedisNodeProcess {
  readonly port: number;
}

export interface SentinelGroup {
  /** The master group name (REDIS_SENTINEL_NAME). */
  readonly name: string;
  /** requirepass of the data nodes (REDIS_PASSWORD). */
  readonly password: string;
  /** `127.0.0.1:p1,127.0.0.1:p2,...` (REDIS_SENTINELS). */
  readonly sentinelList: string;
  /** The data nodes: the first master, then its replicas. */
  readonly nodes: readonly NodeProcess[];
  readonly sentinels: readonly NodeProcess[];
  /** The master's port as the first answering sentinel reports it. */
  masterPort(): Promise<number>;
  /** The data node that listens on `port`. */
  node(port: number): NodeProcess;
  /**
   * Waits until every sentinel knows the others and every replica (none down), and every replica's
   * link to the master is up: ready for a failover.
   */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** Env of a daemon using this group. */
  env(): Record<string, string>;
  stop(): Promise<void>;
}

export interface SentinelGroupOptions {
  readonly replicas?: number;
  readonly sentinels?: number;
  readonly quorum?: number;
  readonly downAfterMs?: number;
  readonly failoverTimeoutMs?: number;
}

const ask = <T>(port: number, password: string | undefined, fn: (r: Redis) => Promise<T>): Promise<T> =>
  onRedisNode(port, fn, { password });

/** `SENTINEL master/replicas` answers as objects. */
function fields(flat: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  const a = flat as string[];
  for (let i = 0; i + 1 < a.length; i += 2) out[String(a[i])] = String(a[i + 1]);
  return out;
}

export async function startSentinelGroup(opts: SentinelGroupOptions = {}): Promise<SentinelGroup> {
  const replicas = opts.replicas ?? 1;
  const sentinelCount = opts.sentinels ?? 3;
  const quorum = opts.quorum ?? 2;
  const name = `trib${randomBytes(3).toString("hex")}`;
  const password = randomBytes(12).toString("hex");
  const dir = mkdtempSync(path.join(os.tmpdir(), "tributary-sentinel-"));
  const nodes: NodeProcess[] = [];
  const sentinels: NodeProcess[] = [];
  const all = () => [...nodes, ...sentinels];
  const stop = async () => {
    await Promise.all(all().map((n) => n.signal("SIGKILL")));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const masterPort = await freePort();
    for (let i = 0; i <= replicas; i++) {
      const port = i === 0 ? masterPort : await freePort();
      const nodeDir = path.join(dir, `node-${port}`);
      mkdirSync(nodeDir);
      const conf = [
        `port ${port}`,
        "bind 127.0.0.1",
        `dir ${nodeDir}`,
        'save ""',
        "appendonly no",
        `requirepass ${password}`,
        `masterauth ${password}`,
        "repl-diskless-sync-delay 0",
        ...(i === 0 ? [] : [`replicaof 127.0.0.1 ${masterPort}`]),
      ];
      writeFileSync(path.join(nodeDir, "redis.conf"), `${conf.join("\n")}\n`);
      const p = spawnRedisNode([path.join(nodeDir, "redis.conf")], i === 0 ? "master" : `replica-${i}`);
      nodes.push({ ...p, port });
    }
    for (const n of nodes) {
      await waitFor(() => (n.exited() ? Promise.reject(new Error(n.log())) : redisAnswersPing(n.port, password)), {
        timeoutMs: 15_000,
        intervalMs: 50,
        what: `redis-server on ${n.port}`,
      });
    }
    for (let i = 0; i < sentinelCount; i++) {
      const port = await freePort();
      const sDir = path.join(dir, `sentinel-${port}`);
      mkdirSync(sDir);
      const conf = [
        `port ${port}`,
        "bind 127.0.0.1",
        `dir ${sDir}`,
        `sentinel monitor ${name} 127.0.0.1 ${masterPort} ${quorum}`,
        `sentinel auth-pass ${name} ${password}`,
        `sentinel down-after-milliseconds ${name} ${opts.downAfterMs ?? 1000}`,
        `sentinel failover-timeout ${name} ${opts.failoverTimeoutMs ?? 5000}`,
        `sentinel parallel-syncs ${name} 1`,
      ];
      // Sentinel rewrites its config file: it must be writable.
      writeFileSync(path.join(sDir, "sentinel.conf"), `${conf.join("\n")}\n`);
      const p = spawnRedisNode([path.join(sDir, "sentinel.conf"), "--sentinel"], `sentinel-${i + 1}`);
      sentinels.push({ ...p, port });
    }
  } catch (err) {
    await stop();
    throw err;
  }

  const group: SentinelGroup = {
    name,
    password,
    sentinelList: sentinels.map((s) => `127.0.0.1:${s.port}`).join(","),
    nodes,
    sentinels,
    async masterPort() {
      for (const s of sentinels) {
        if (s.exited()) continue;
        try {
          const addr = (await ask(s.port, undefined, (r) => r.call("SENTINEL", "get-master-addr-by-name", name))) as string[] | null;
          if (addr) return Number(addr[1]);
        } catch {
          // the next sentinel
        }
      }
      throw new Error("no sentinel answered");
    },
    node(port) {
      const n = nodes.find((x) => x.port === port);
      if (!n) throw new Error(`no node on ${port}`);
      return n;
    },
    async waitHealthy(timeoutMs = 30_000) {
      await waitFor(
        async () => {
          for (const s of sentinels) {
            if (s.exited()) continue;
            const ok = await ask(s.port, undefined, async (r) => {
              const master = fields(await r.call("SENTINEL", "master", name));
              const reps = ((await r.call("SENTINEL", "replicas", name)) as unknown[]).map(fields);
              const liveReplicas = reps.filter((x) => x.flags === "slave" && x["master-link-status"] === "ok");
              const liveNodes = nodes.filter((n) => !n.exited()).length;
              return (
                master.flags === "master" &&
                Number(master["num-other-sentinels"]) >= sentinels.filter((x) => !x.exited()).length - 1 &&
                liveReplicas.length >= liveNodes - 1
              );
            }).catch(() => false);
            if (!ok) return false;
          }
          return true;
        },
        { timeoutMs, intervalMs: 200, what: "a healthy sentinel group (sentinels know each other and every replica, links up)" },
      ).catch((err: Error) => {
        throw new Error(
          `${err.message}\n${all()
            .map((n) => n.log())
            .join("\n")}`,
        );
      });
    },
    env() {
      return { REDIS_SENTINELS: group.sentinelList, REDIS_SENTINEL_NAME: name, REDIS_PASSWORD: password };
    },
    stop,
  };
  return group;
}
