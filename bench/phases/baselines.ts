/** The baselines Tributary is judged against: bare Koa, Koa + one EVALSHA, plain BullMQ draining a backlog. */
import { bullmqBaseline, koaBaseline, koaEvalshaBaseline } from "../baselines.js";
import type { Phase } from "../context.js";
import { fmt } from "../stats.js";

/** Plain BullMQ, next to the drain it is compared with (no Tributary worker runs meanwhile). */
export const bullmq: Phase = {
  name: "bullmq",
  needs: [],
  async run({ settings: S, redisServer, receiver, log }) {
    log(`plain BullMQ baseline: ${S.backlog} jobs, concurrency ${S.deliveryConcurrency}`);
    const bull = await bullmqBaseline({
      redisUrl: redisServer.url,
      redisPid: redisServer.pid,
      receiver,
      backlog: S.backlog,
      concurrency: S.deliveryConcurrency,
      seqBase: 0,
      deadlineMs: 90_000,
    });
    log(`  ${fmt(bull.perSec)} deliveries/s (${bull.delivered}/${bull.expected})`);
    return { bull };
  },
};

/** Bare Koa, next to the single-emit ingest it is compared with. */
export const koa: Phase = {
  name: "koa",
  needs: [],
  async run({ settings: S, log }) {
    log(`bare Koa baseline: ${S.durationS}s, ${S.connections} connections`);
    const koa = await koaBaseline({ durationS: S.durationS, warmupS: S.warmupS, connections: S.connections });
    log(`  ${fmt(koa.reqPerSec)} req/s`);
    return { koa };
  },
};

/** The same Koa stack doing one EVALSHA per request: the floor under an acknowledged emit. */
export const koaredis: Phase = {
  name: "koaredis",
  needs: [],
  async run({ settings: S, redisServer, log }) {
    log(`Koa + one EVALSHA per request baseline: ${S.durationS}s, ${S.connections} connections`);
    const koaRedis = await koaEvalshaBaseline({
      durationS: S.durationS,
      warmupS: S.warmupS,
      connections: S.connections,
      redisUrl: redisServer.url,
      redisPid: redisServer.pid,
    });
    log(`  ${fmt(koaRedis.reqPerSec)} req/s`);
    return { koaRedis };
  },
};
