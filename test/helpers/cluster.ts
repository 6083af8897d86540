import { createRequire } from "node:module";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll } from "vitest";
import { freePort, redisAnswersPing } from "../../src/redis/embedded.js";
import { onRedisNode, type RedisNodeProcess, spawnRedisNode } from "./redis-node.js";
import { waitFor } from "./wait.js";

/**
 * A real Redis Cluster on loopback for tests, from the `redis-server` (>= 7.0) on PATH, without
 * Docker or redis-cli (docs/design "redis-cluster" §3, in TypeScript): `masters` nodes and
 * `replicas` replicas per master, each with a client port and a cluster-bus port (`--cluster-port`)
 * picked at run time, data in a temporary folder. The slots are split in contiguous ranges
 * (ADDSLOTSRANGE), every node MEETs every other at once (no gossip rounds to wait for), replicas
 * are attached with CLUSTER REPLICATE, then the helper waits for `cluster_state:ok` on every node
 * and, with replicas, for every replica's link to its master to be up (first sync done, so a
 * failover test has the data there): about 2.5 s for masters alone, 3.5-4.5 s with replicas, most
 * of it Redis's own delay before a fresh master serves. Every wait is bounded.
 *
 * Failover tests: `kill(node)` SIGKILLs a node; `waitForFailover(oldMaster)` waits until a live
 * node serves the old master's slots as a master and every live node says `cluster_state:ok`.
 * `--cluster-require-full-coverage no` is the default (the live shards keep serving while one
 * fails over; README "Scaling out" advises it), `nodeTimeoutMs` sets how fast a dead master is
 * noticed (1000 ms: promoted in about 2.5 s). `restart(node)` starts a killed node again on its
 * ports and folder: it rejoins from its nodes.conf (an old master as a replica of its successor).
 * `stop()` SIGKILLs every node and removes the folder; a process-exit hook SIGKILLs whatever is
 * left if the test worker goes away first.
 */

export interface ClusterNode {
  readonly port: number;
  readonly busPort: number;
  /** The current process's pid (changes on `restart`). */
  readonly pid: number;
  /** The node's cluster id (CLUSTER MYID). */
  readonly id: string;
  /** The role given at creation (a failover changes the real one; see `LocalCluster.roleOf`). */
  readonly role: "master" | "replica";
  /** The port of the master this replica was attached to at creation; undefined for a master. */
  readonly replicaOf: number | undefined;
  /** The first slot and the last slot this master was given (for a replica: its master's). */
  readonly slots: readonly [number, number];
  exited(): boolean;
  /** The last lines the node printed. */
  log(): string;
  /** SIGKILLs the node (resolves once it exited); the same as `LocalCluster.kill(node)`. */
  kill(): Promise<void>;
}

export interface LocalCluster {
  /** Every node: the masters first, then the replicas. */
  readonly nodes: readonly ClusterNode[];
  /** The nodes created as masters. */
  readonly masters: readonly ClusterNode[];
  /** The nodes created as replicas. */
  readonly replicas: readonly ClusterNode[];
  /** `127.0.0.1:p1,127.0.0.1:p2,...` of every node (REDIS_CLUSTER_NODES). */
  readonly seedList: string;
  /** `[{host, port}]` of every node, for `new Cluster(...)`. */
  readonly seeds: readonly { host: string; port: number }[];
  /** The node that was given `slot` at creation. */
  nodeForSlot(slot: number): ClusterNode;
  /** The node listening on `port`. */
  node(port: number): ClusterNode;
  /** The master serving `slot` now, as the first live node answering CLUSTER SLOTS says. */
  masterForSlot(slot: number): Promise<ClusterNode>;
  /** The role a live node reports now (ROLE). */
  roleOf(node: ClusterNode): Promise<"master" | "replica">;
  /** SIGKILLs `node` and waits for its exit. */
  kill(node: ClusterNode): Promise<void>;
  /** Starts a killed node again (same ports, folder and nodes.conf) and waits until it answers PING. */
  restart(node: ClusterNode, timeoutMs?: number): Promise<void>;
  /**
   * Waits (bounded, default 30 s) until the slots `oldMaster` served at creation are served by
   * another live node that reports itself master, and every live node says `cluster_state:ok`.
   * Returns the new master and how long the wait took.
   */
  waitForFailover(oldMaster: ClusterNode, timeoutMs?: number): Promise<{ newMaster: ClusterNode; waitedMs: number }>;
  /**
   * Waits (bounded, default 30 s) until every live node says `cluster_state:ok`, knows every node,
   * and every live replica's link to its master is up.
   */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface LocalClusterOptions {
  /** Number of masters (default 3; 1 gives a single node holding every slot). */
  readonly masters?: number;
  /** Replicas per master (default 0). */
  readonly replicas?: number;
  /** `cluster-node-timeout` in ms (default 2000; 1000 for fast failover tests). */
  readonly nodeTimeoutMs?: number;
  /** `cluster-require-full-coverage` (default false: live shards keep serving while one fails over). */
  readonly requireFullCoverage?: boolean;
  /** Append-only persistence with `appendfsync everysec` (default false: no persistence at all). */
  readonly appendonly?: boolean;
  /** Deadline of the whole start (default 30 s, 45 s with replicas: generous for a loaded 2-core machine). */
  readonly startTimeoutMs?: number;
}

const SLOTS = 16384;

/**
 * The hash slot of a key, as Redis Cluster computes it (CRC16 of the `{tag}` when there is one,
 * mod 16384): ioredis's own `cluster-key-slot` (untyped, hence the typed require).
 */
export const keySlot: (key: string | Buffer) => number = createRequire(import.meta.url)("cluster-key-slot");

/** One short-lived admin connection to a node (fails fast: no retries, bounded timeouts). */
const onNode = <T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T> =>
  onRedisNode(port, fn, { connectTimeoutMs: 2000, commandTimeoutMs: 5000 });

/** The contiguous slot range of master `i` of `n` (the last one takes the remainder). */
export function slotRange(i: number, n: number): [number, number] {
  const per = Math.floor(SLOTS / n);
  return [i * per, i === n - 1 ? SLOTS - 1 : (i + 1) * per - 1];
}

/** One line of CLUSTER NODES. */
interface NodeLine {
  id: string;
  port: number;
  flags: string[];
  masterId: string;
  linkState: string;
}

function parseNodes(text: string): NodeLine[] {
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => {
      const [id = "", addr = "", flags = "", masterId = "", , , , linkState = ""] = l.split(" ");
      return { id, port: Number(/:(\d+)@/.exec(addr)?.[1] ?? 0), flags: flags.split(","), masterId, linkState };
    });
}

const infoField = (info: string, field: string): string | undefined => new RegExp(`^${field}:(.*?)\\r?$`, "m").exec(info)?.[1];

/** A node of the cluster as the helper keeps it: the process is replaced by `restart`. */
interface Managed extends Omit<ClusterNode, "id"> {
  id: string;
  proc: RedisNodeProcess;
  args: string[];
}

export async function startCluster(opts: LocalClusterOptions = {}): Promise<LocalCluster> {
  const masters = opts.masters ?? 3;
  const replicasPer = opts.replicas ?? 0;
  if (!Number.isInteger(masters) || masters < 1) throw new Error("masters must be a positive integer");
  if (!Number.isInteger(replicasPer) || replicasPer < 0) throw new Error("replicas must be a non-negative integer");
  const total = masters * (1 + replicasPer);
  const deadline = Date.now() + (opts.startTimeoutMs ?? (replicasPer > 0 ? 45_000 : 30_000));
  const left = () => Math.max(1000, deadline - Date.now());
  const dir = mkdtempSync(path.join(os.tmpdir(), "tributary-cluster-"));
  const procs: Managed[] = [];
  const stop = async () => {
    await Promise.all(procs.map((p) => p.proc.signal("SIGKILL")));
    rmSync(dir, { recursive: true, force: true });
  };
  const logs = () => procs.map((p) => p.proc.log()).join("\n");
  const used = new Set<number>();
  const pickPort = async () => {
    for (;;) {
      const p = await freePort();
      if (!used.has(p)) {
        used.add(p);
        return p;
      }
    }
  };
  const live = () => procs.filter((p) => !p.proc.exited());
  const byPort = (port: number) => {
    const n = procs.find((p) => p.port === port);
    if (!n) throw new Error(`no cluster node on port ${port}`);
    return n;
  };

  /** Every live node says cluster_state:ok and knows `total` nodes (none in handshake); replicas' links are up. */
  const healthy = async (): Promise<true | string> => {
    for (const n of live()) {
      const problem = await onNode(n.port, async (r) => {
        const info = String(await r.call("CLUSTER", "INFO"));
        if (infoField(info, "cluster_state") !== "ok") return `${n.port}: cluster_state ${infoField(info, "cluster_state")}`;
        const known = parseNodes(String(await r.call("CLUSTER", "NODES")));
        if (known.length !== total || known.some((k) => k.flags.includes("handshake")))
          return `${n.port}: knows ${known.length} of ${total} nodes`;
        const repl = String(await r.call("INFO", "replication"));
        if (infoField(repl, "role") === "slave" && infoField(repl, "master_link_status") !== "up")
          return `${n.port}: link to its master ${infoField(repl, "master_link_status")}`;
        return undefined;
      });
      if (problem !== undefined) return problem;
    }
    return true;
  };

  try {
    for (let i = 0; i < total; i++) {
      const port = await pickPort();
      const busPort = await pickPort();
      const nodeDir = path.join(dir, String(port));
      mkdirSync(nodeDir);
      const args = [
        "--port",
        String(port),
        "--bind",
        "127.0.0.1",
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        String(busPort),
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        String(opts.nodeTimeoutMs ?? 2000),
        "--cluster-require-full-coverage",
        opts.requireFullCoverage ? "yes" : "no",
        "--save",
        "",
        "--repl-diskless-sync-delay",
        "0",
        "--dir",
        nodeDir,
        ...(opts.appendonly ? ["--appendonly", "yes", "--appendfsync", "everysec"] : ["--appendonly", "no"]),
      ];
      const isMaster = i < masters;
      const masterIndex = isMaster ? i : (i - masters) % masters;
      const proc = spawnRedisNode(args, `cluster-${port}`);
      procs.push({
        proc,
        args,
        port,
        busPort,
        id: "",
        role: isMaster ? "master" : "replica",
        replicaOf: isMaster ? undefined : procs[masterIndex]?.port,
        slots: slotRange(masterIndex, masters),
        get pid() {
          return this.proc.pid;
        },
        exited() {
          return this.proc.exited();
        },
        log() {
          return this.proc.log();
        },
        kill() {
          return this.proc.signal("SIGKILL");
        },
      });
    }
    for (const n of procs) {
      await waitFor(() => (n.exited() ? Promise.reject(new Error(`exited: ${n.log()}`)) : redisAnswersPing(n.port)), {
        timeoutMs: left(),
        intervalMs: 50,
        what: `redis-server (cluster node) on ${n.port}`,
      });
      n.id = await onNode(n.port, async (r) => String(await r.call("CLUSTER", "MYID")));
    }
    for (const [i, n] of procs.entries()) {
      if (n.role !== "master") continue;
      await onNode(n.port, async (r) => {
        await r.call("CLUSTER", "ADDSLOTSRANGE", n.slots[0], n.slots[1]);
        await r.call("CLUSTER", "SET-CONFIG-EPOCH", i + 1);
      });
    }
    // Full-mesh MEET: every node learns every other at once instead of through gossip rounds.
    for (const a of procs) {
      await onNode(a.port, async (r) => {
        for (const b of procs) if (b.port > a.port) await r.call("CLUSTER", "MEET", "127.0.0.1", b.port, b.busPort);
      });
    }
    // A replica can only REPLICATE a master it knows (handshake done): retried until it does.
    for (const n of procs) {
      const masterId = n.replicaOf === undefined ? undefined : byPort(n.replicaOf).id;
      if (masterId === undefined) continue;
      await waitFor(
        () =>
          onNode(n.port, async (r) => {
            await r.call("CLUSTER", "REPLICATE", masterId);
            return true;
          }),
        { timeoutMs: left(), intervalMs: 50, what: `CLUSTER REPLICATE on ${n.port}` },
      );
    }
    let last: true | string = "not checked";
    await waitFor(
      async () => {
        const dead = procs.find((p) => p.exited());
        if (dead) throw new Error(`node ${dead.port} exited`);
        last = await healthy();
        return last === true;
      },
      { timeoutMs: left(), intervalMs: 50, what: `a healthy cluster of ${masters} masters and ${replicasPer} replicas each` },
    ).catch((err: Error) => {
      throw new Error(`${err.message} (${String(last)})`);
    });
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    await stop();
    throw new Error(`${message}\n${logs()}`);
  }

  /** The port of the node serving `slot` as master, from the first live node that answers. */
  const slotOwner = async (slot: number): Promise<number | undefined> => {
    for (const n of live()) {
      const owner = await onNode(n.port, async (r) => {
        const ranges = (await r.call("CLUSTER", "SLOTS")) as [number, number, [string, number, string?]][];
        const range = ranges.find(([lo, hi]) => slot >= lo && slot <= hi);
        return range?.[2]?.[1];
      }).catch(() => undefined);
      if (owner !== undefined) return Number(owner);
    }
    return undefined;
  };
  const roleOf = (n: ClusterNode) =>
    onNode(n.port, async (r) => (((await r.call("ROLE")) as string[])[0] === "master" ? ("master" as const) : ("replica" as const)));

  const nodes: readonly ClusterNode[] = procs;
  const seeds = procs.map((p) => ({ host: "127.0.0.1", port: p.port }));
  return {
    nodes,
    masters: nodes.filter((n) => n.role === "master"),
    replicas: nodes.filter((n) => n.role === "replica"),
    seeds,
    seedList: seeds.map((s) => `${s.host}:${s.port}`).join(","),
    nodeForSlot(slot) {
      const n = procs.find((p) => p.role === "master" && slot >= p.slots[0] && slot <= p.slots[1]);
      if (!n) throw new Error(`no node holds slot ${slot}`);
      return n;
    },
    node: byPort,
    async masterForSlot(slot) {
      const port = await slotOwner(slot);
      if (port === undefined) throw new Error(`no live node answers CLUSTER SLOTS for slot ${slot}`);
      return byPort(port);
    },
    roleOf,
    async kill(node) {
      await byPort(node.port).proc.signal("SIGKILL");
    },
    async restart(node, timeoutMs = 15_000) {
      const n = byPort(node.port);
      if (!n.exited()) throw new Error(`node ${n.port} is still running`);
      n.proc = spawnRedisNode(n.args, `cluster-${n.port}`);
      await waitFor(() => (n.exited() ? Promise.reject(new Error(`exited: ${n.log()}`)) : redisAnswersPing(n.port)), {
        timeoutMs,
        intervalMs: 50,
        what: `restarted cluster node on ${n.port}`,
      });
    },
    async waitForFailover(oldMaster, timeoutMs = 30_000) {
      const started = Date.now();
      let last = "not checked";
      const newMaster = await waitFor(
        async () => {
          const port = await slotOwner(oldMaster.slots[0]);
          if (port === undefined || port === oldMaster.port) {
            last = `slot ${oldMaster.slots[0]} owner ${port ?? "unknown"}`;
            return undefined;
          }
          const n = byPort(port);
          if (n.exited() || (await roleOf(n)) !== "master") {
            last = `${port} is not a live master yet`;
            return undefined;
          }
          for (const m of live()) {
            const state = await onNode(m.port, async (r) => infoField(String(await r.call("CLUSTER", "INFO")), "cluster_state"));
            if (state !== "ok") {
              last = `${m.port}: cluster_state ${state}`;
              return undefined;
            }
          }
          return n;
        },
        { timeoutMs, intervalMs: 50, what: `a replica to take over the slots of ${oldMaster.port}` },
      ).catch((err: Error) => {
        throw new Error(`${err.message} (${last})\n${logs()}`);
      });
      return { newMaster, waitedMs: Date.now() - started };
    },
    async waitHealthy(timeoutMs = 30_000) {
      let last: true | string = "not checked";
      await waitFor(
        async () => {
          last = await healthy();
          return last === true;
        },
        { timeoutMs, intervalMs: 50, what: "a healthy cluster" },
      ).catch((err: Error) => {
        throw new Error(`${err.message} (${String(last)})`);
      });
    },
    stop,
  };
}

/**
 * A local cluster of the enclosing `describe` (or file): started before its tests, stopped after
 * them. Returns a getter, since the cluster exists only once `beforeAll` ran.
 */
export function useCluster(opts: LocalClusterOptions = {}): () => LocalCluster {
  let cluster: LocalCluster | undefined;
  beforeAll(async () => {
    cluster = await startCluster(opts);
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  return () => {
    if (!cluster) throw new Error("useCluster: the cluster did not start");
    return cluster;
  };
}
