import { createRequire } from "node:module";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { freePort, redisAnswersPing } from "../../src/redis/embedded.js";
import { onRedisNode, spawnRedisNode } from "./redis-node.js";
import { waitFor } from "./wait.js";

/**
 * A real Redis Cluster on loopback for tests, from the `redis-server` (>= 7.0) on PATH, without
 * Docker or redis-cli (docs/design "redis-cluster" §3, in TypeScript): `masters` nodes, each with a
 * client port and a cluster-bus port (`--cluster-port`) picked at run time, data in a temporary
 * folder. The slots are split in contiguous ranges (ADDSLOTSRANGE), every node MEETs every other at
 * once (no gossip rounds to wait for), then the helper waits for `cluster_state:ok` on every node:
 * about 2.5 s, most of it Redis's own delay before a fresh master serves. Every wait is bounded.
 * `stop()` SIGKILLs every node and removes the folder; a process-exit hook SIGKILLs whatever is
 * left if the test worker goes away first.
 */

export interface ClusterNode {
  readonly port: number;
  readonly busPort: number;
  readonly pid: number;
  /** The first slot and the last slot this master was given. */
  readonly slots: readonly [number, number];
  exited(): boolean;
  /** The last lines the node printed. */
  log(): string;
  /** SIGKILLs the node (resolves once it exited). */
  kill(): Promise<void>;
}

export interface LocalCluster {
  readonly nodes: readonly ClusterNode[];
  /** `127.0.0.1:p1,127.0.0.1:p2,...` (REDIS_CLUSTER_NODES). */
  readonly seedList: string;
  /** `[{host, port}]` for `new Cluster(...)`. */
  readonly seeds: readonly { host: string; port: number }[];
  /** The node that was given `slot` at creation. */
  nodeForSlot(slot: number): ClusterNode;
  stop(): Promise<void>;
}

export interface LocalClusterOptions {
  /** Number of masters (default 3; 1 gives a single node holding every slot). */
  readonly masters?: number;
  /** `cluster-node-timeout` in ms (default 2000). */
  readonly nodeTimeoutMs?: number;
  /** Deadline of the whole start (default 30 s: generous for a loaded 2-core machine). */
  readonly startTimeoutMs?: number;
}

const SLOTS = 16384;

/**
 * The hash slot of a key, as Redis Cluster computes it (CRC16 of the `{tag}` when there is one,
 * mod 16384): ioredis's own `cluster-key-slot` (untyped, hence the typed require).
 */
export const keySlot: (key: string | Buffer) => number = createRequire(import.meta.url)("cluster-key-slot");

/** A cluster node's process (test/helpers/redis-node.ts). */
function spawnNode(args: string[], name: string): Omit<ClusterNode, "port" | "busPort" | "slots"> {
  const p = spawnRedisNode(args, name);
  return { pid: p.pid, exited: p.exited, log: p.log, kill: () => p.signal("SIGKILL") };
}

/** One short-lived admin connection to a node (fails fast: no retries, bounded timeouts). */
const onNode = <T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T> =>
  onRedisNode(port, fn, { connectTimeoutMs: 2000, commandTimeoutMs: 5000 });

/** The contiguous slot range of master `i` of `n` (the last one takes the remainder). */
export function slotRange(i: number, n: number): [number, number] {
  const per = Math.floor(SLOTS / n);
  return [i * per, i === n - 1 ? SLOTS - 1 : (i + 1) * per - 1];
}

export async function startCluster(opts: LocalClusterOptions = {}): Promise<LocalCluster> {
  const masters = opts.masters ?? 3;
  if (!Number.isInteger(masters) || masters < 1) throw new Error("masters must be a positive integer");
  const deadline = Date.now() + (opts.startTimeoutMs ?? 30_000);
  const left = () => Math.max(1000, deadline - Date.now());
  const dir = mkdtempSync(path.join(os.tmpdir(), "tributary-cluster-"));
  const procs: ClusterNode[] = [];
  const stop = async () => {
    await Promise.all(procs.map((p) => p.kill()));
    rmSync(dir, { recursive: true, force: true });
  };
  const logs = () => procs.map((p) => p.log()).join("\n");
  try {
    for (let i = 0; i < masters; i++) {
      const port = await freePort();
      let busPort = await freePort();
      while (busPort === port) busPort = await freePort();
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
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        nodeDir,
      ];
      const p = spawnNode(args, `cluster-${port}`);
      procs.push({ ...p, port, busPort, slots: slotRange(i, masters) });
    }
    for (const n of procs) {
      await waitFor(() => (n.exited() ? Promise.reject(new Error(`exited: ${n.log()}`)) : redisAnswersPing(n.port)), {
        timeoutMs: left(),
        intervalMs: 50,
        what: `redis-server (cluster node) on ${n.port}`,
      });
    }
    for (const [i, n] of procs.entries()) {
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
    await waitFor(
      async () => {
        for (const n of procs) {
          if (n.exited()) throw new Error(`node ${n.port} exited`);
          const ok = await onNode(n.port, async (r) => {
            const info = String(await r.call("CLUSTER", "INFO"));
            const known = String(await r.call("CLUSTER", "NODES"))
              .split("\n")
              .filter((l) => l.trim() !== "").length;
            return /^cluster_state:ok\r?$/m.test(info) && known === masters;
          });
          if (!ok) return false;
        }
        return true;
      },
      { timeoutMs: left(), intervalMs: 50, what: `cluster_state:ok on all ${masters} nodes` },
    );
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    await stop();
    throw new Error(`${message}\n${logs()}`);
  }
  const seeds = procs.map((p) => ({ host: "127.0.0.1", port: p.port }));
  return {
    nodes: procs,
    seeds,
    seedList: seeds.map((s) => `${s.host}:${s.port}`).join(","),
    nodeForSlot(slot) {
      const n = procs.find((p) => slot >= p.slots[0] && slot <= p.slots[1]);
      if (!n) throw new Error(`no node holds slot ${slot}`);
      return n;
    },
    stop,
  };
}
