import type { Redis } from "ioredis";

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
 * How long one readiness answer is reused. Kubernetes probes, `tributary healthcheck` and every
 * Prometheus scrape of `tributary_ready` ask for it; without reuse each asked for a PING and a
 * trivial component build of its own.
 */
export const READY_REUSE_MS = 1000;

/**
 * `check` asked at most once per `reuseMs`: callers that ask while a check runs share it, and an
 * answer younger than `reuseMs` is given again without checking.
 */
export function sharedCheck(check: () => Promise<boolean>, reuseMs = READY_REUSE_MS, now: () => number = Date.now): () => Promise<boolean> {
  let running: Promise<boolean> | undefined;
  let last: { readonly ok: boolean; readonly atMs: number } | undefined;
  return () => {
    if (running) return running;
    if (last && now() - last.atMs < reuseMs) return Promise.resolve(last.ok);
    const started = now();
    running = check().finally(() => {
      running = undefined;
    });
    running.then(
      (ok) => {
        last = { ok, atMs: started };
      },
      () => {},
    );
    return running;
  };
}

/** What a process's readiness is made of. */
export interface ReadinessParts {
  /** The command connection (its connection-level PING). */
  readonly redis: Redis;
  readonly runtime: { running(): boolean };
  /** The worker role's delivery feature, when this process runs it. */
  readonly delivery: { running(): boolean } | undefined;
  readonly analyzer: { healthy(): Promise<boolean> };
}

/**
 * The process's readiness, bounded: Redis answers, its roles run, and the component compiler can
 * build a trivial component (creating components needs it). /readyz (api role and ops listener)
 * and the `tributary_ready` gauge all read this one check, shared (`sharedCheck`).
 */
export function processReadiness(p: ReadinessParts): () => Promise<boolean> {
  return sharedCheck(
    boundedReadiness(
      async () =>
        p.redis.status === "ready" &&
        (await p.redis.ping()) === "PONG" &&
        p.runtime.running() &&
        (p.delivery === undefined || p.delivery.running()) &&
        (await p.analyzer.healthy()),
    ),
  );
}
