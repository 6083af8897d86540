import type { RedisClient } from "../store/context.js";
import { clusterState } from "../store/server-info.js";

/**
 * How long a readiness check may take: /readyz must answer while Redis stalls (a stalled Redis is
 * not ready), because probes and `tributary healthcheck` give up after 2 s and an answer that
 * never comes tells them less than a 503. The api role's /readyz applies the same bound.
 */
export const READY_DEADLINE_MS = 1500;

/**
 * `probe` made safe to call from anywhere (the ops listener, the `tributary_ready` gauge at scrape
 * time): it never throws (an error is "not ready") and answers false once `deadlineMs` have passed.
 */
export function boundedReadiness(probe: () => Promise<boolean>, deadlineMs = READY_DEADLINE_MS): () => Promise<boolean> {
  return async () => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), deadlineMs);
    });
    try {
      return await Promise.race([probe().catch(() => false), late]);
    } finally {
      clearTimeout(timer);
    }
  };
}

/**
 * `check` run once for every caller that asks while it runs: Kubernetes probes, `tributary
 * healthcheck` and scrapes of `tributary_ready` arriving together share one PING and one trivial
 * component build. A finished answer is not reused: a probe right after Redis stalls must see it.
 */
export function sharedCheck(check: () => Promise<boolean>): () => Promise<boolean> {
  let running: Promise<boolean> | undefined;
  return () => {
    running ??= check().finally(() => {
      running = undefined;
    });
    return running;
  };
}

/**
 * The connection-level PING; on a Cluster it goes to one master (the client picks one), and that
 * node must also report `cluster_state:ok` (every slot served: during a failover, with
 * `cluster-require-full-coverage yes`, the cluster refuses commands and so is not ready).
 */
async function redisAnswers(redis: RedisClient): Promise<boolean> {
  if ((await redis.ping()) !== "PONG") return false;
  if (!("isCluster" in redis && redis.isCluster)) return true;
  return (await clusterState(redis)) === "ok";
}

/** What a process's readiness is made of. */
export interface ReadinessParts {
  /** The command connection (its connection-level PING). */
  readonly redis: RedisClient;
  readonly runtime: { running(): boolean };
  /** The worker role's delivery feature, when this process runs it. */
  readonly delivery: { running(): boolean } | undefined;
  readonly analyzer: { healthy(): Promise<boolean> };
}

/**
 * The process's readiness, bounded: Redis answers (a Cluster: with every slot served), its roles run, and the component compiler can
 * build a trivial component (creating components needs it). /readyz (api role and ops listener)
 * and the `tributary_ready` gauge all read this one check, shared (`sharedCheck`).
 */
export function processReadiness(p: ReadinessParts): () => Promise<boolean> {
  return sharedCheck(
    boundedReadiness(
      async () =>
        p.redis.status === "ready" &&
        (await redisAnswers(p.redis)) &&
        p.runtime.running() &&
        (p.delivery === undefined || p.delivery.running()) &&
        (await p.analyzer.healthy()),
    ),
  );
}
