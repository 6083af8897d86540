import { randomUUID } from "node:crypto";
import type { ConnectionOptions, Queue } from "bullmq";
import type { RedisClient } from "../store/context.js";
import type { Agent } from "undici";
import type { Config, Role } from "../config/schema.js";
import type { RandomBytes } from "../domain/ids.js";
import type { Ingest } from "../events/ingest.js";
import { guardedFetchText } from "../net/fetch-text.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import type { ComponentCatalog } from "./ports.js";
import type { Keys } from "../store/keys.js";
import type { SourceCache } from "../store/source-cache.js";
import type { SourceStore } from "../store/sources.js";
import type { UserStore } from "../store/users.js";
import { type IngressGate, SourceRequests } from "./source-requests.js";
import { RuntimeLifecycle } from "./lifecycle.js";
import { Quotas } from "./quotas.js";
import { RateLimiter } from "../store/rate-limit.js";
import { RunBacklog } from "../store/run-backlog.js";
import { RequestGates } from "../store/request-gate.js";
import { RunStream } from "../store/run-stream.js";
import { SourceRunIntake } from "./run-intake.js";
import { RunRecords } from "./run-records.js";
import { SourceRunner } from "./runner.js";
import { ProcessSandbox, type SandboxCrash } from "./sandbox/process-sandbox.js";
import type { HostFetch } from "./sandbox/types.js";
import { TimerControl, TimerScheduler } from "./timers.js";
import { RuntimeWorkers } from "./workers.js";

export interface RuntimeDeps {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  redis: RedisClient;
  /** A dedicated connection for the scheduler's blocking reads. */
  blocking: RedisClient;
  /** Opens a dedicated connection for blocking reads (the run stream's consumer; worker role only). */
  openBlocking: (name: string) => RedisClient;
  keys: Keys;
  connection: ConnectionOptions;
  agent: Agent;
  users: UserStore;
  sourceStore: SourceStore;
  components: ComponentCatalog;
  /**
   * Sources, components and plans kept in memory (store/source-cache.ts); started with the runtime,
   * stopped by close(). Without it, requests and runs read them from Redis each time.
   */
  sourceCache?: SourceCache;
  ingest: Ingest;
  /** The per-user ingress rate that HTTP source requests count against. */
  ingressRate?: IngressGate;
  timersQueue: Queue;
  now: () => number;
  randomBytes: RandomBytes;
  /** Told when a sandbox process ended other than by close() (see fatal.ts): the daemon logs it. */
  onSandboxCrash?: (crash: SandboxCrash) => void;
}

/** The source runtime (SPEC §5) as the rest of the daemon sees it. */
export interface Runtime {
  /** Hooks and timers around a source's life. */
  readonly lifecycle: RuntimeLifecycle;
  /** Requests to HTTP source endpoints (served under /e/<token> by api/routes/source-endpoints.ts). */
  readonly requests: SourceRequests;
  /** Where accepted source runs are made durable: fan-out hands deliveries to source listeners here. */
  readonly runs: SourceRunIntake;
  /** Starts the workers (worker role) and the timer scheduler (scheduler role). */
  start(roles: ReadonlySet<Role>): Promise<void>;
  /** True while the workers and scheduler this process started are running. */
  running(): boolean;
  close(): Promise<void>;
}

/**
 * A run stream entry idle this long past the run time limit is taken over from its consumer (which
 * renews its entries' leases while it lives): a SIGKILLed worker's runs are redone this soon.
 */
const RUN_CLAIM_MARGIN_MS = 5_000;

/** Largest response the sandbox's fetch accepts. */
const SANDBOX_FETCH_MAX_BYTES = 5 * 1024 * 1024;

export function createRuntime(d: RuntimeDeps): Runtime {
  const { config } = d;
  const fetch: HostFetch = async (url, init) => {
    const res = await guardedFetchText(url, {
      agent: d.agent,
      timeoutMs: Math.min(config.sandboxTimeoutMs, 30_000),
      maxBytes: Math.min(SANDBOX_FETCH_MAX_BYTES, init.maxBytes ?? SANDBOX_FETCH_MAX_BYTES),
      method: init.method,
      headers: init.headers,
      body: init.body,
      signal: init.signal,
    });
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(", ") : v;
    return { status: res.status, statusText: res.statusText, headers, body: res.text };
  };
  const onCrash = d.onSandboxCrash ? { onCrash: d.onSandboxCrash } : {};
  // Component code runs in sandbox processes of their own: see sandbox/process-sandbox.ts.
  const sandbox = new ProcessSandbox(
    { memoryMb: config.sandboxMemoryMb, timeoutMs: config.sandboxTimeoutMs },
    {
      fetch,
      // Source runs and inline customResponse runs share the pool: never fewer isolates than runs.
      maxIsolates: Math.max(16, config.sourceRunConcurrency * 2),
      ...onCrash,
    },
  );
  // Inline (customResponse) runs get their own isolates; endpoints cap them per source and user.
  const inlineSandbox = new ProcessSandbox(
    { memoryMb: config.sandboxMemoryMb, timeoutMs: config.sandboxTimeoutMs },
    { fetch, maxIsolates: config.sourceInlineIsolates, ...onCrash },
  );
  const cache = d.sourceCache;
  const plans = {
    plan: (userId: string) => {
      const load = async () => (await d.users.get(userId))?.plan;
      return cache ? cache.plan(userId, load) : load();
    },
  };
  const records = new RunRecords(d.sourceStore, d.components, cache);
  const quotas = new Quotas(d.redis, d.keys, plans, {
    dailyInvocations: config.freeDailyInvocationsQuota,
    dailyComputeMs: config.freeDailyComputeTimeQuotaMs,
  });
  const runner = new SourceRunner({
    redis: d.redis,
    keys: d.keys,
    sandbox,
    inlineSandbox,
    sources: d.sourceStore,
    components: d.components,
    ingest: d.ingest,
    quotas,
    metrics: d.metrics,
    logger: d.logger,
    now: d.now,
    randomBytes: d.randomBytes,
    records,
  });
  const backlog = new RunBacklog(d.redis, d.keys);
  const runStream = new RunStream(d.redis, d.keys, config.sourceRunStreamPerUser, d.now);
  const runs = new SourceRunIntake(runStream);
  const timerControl = new TimerControl(d.redis, d.keys);
  const lifecycle = new RuntimeLifecycle(runner, d.components, timerControl, d.logger, quotas, {
    hooksPerUser: config.sourceHookConcurrencyPerUser,
    hookWaitMs: config.sandboxTimeoutMs,
  });
  const requests = new SourceRequests({
    records,
    runner,
    quotas,
    limiter: new RateLimiter(d.redis, config.sourceHttpRatePerSecond, config.sourceHttpRatePerSecond * 2),
    gates: new RequestGates(d.redis, d.now),
    ingress: d.ingressRate,
    keys: d.keys,
    runs,
    logger: d.logger,
    now: d.now,
    inlinePerSource: config.sourceInlineConcurrency,
  });
  let workers: RuntimeWorkers | undefined;
  let scheduler: TimerScheduler | undefined;
  return {
    lifecycle,
    requests,
    runs,
    async start(roles) {
      // Hooks and queued runs use `sandbox` (every role); `inlineSandbox` (customResponse runs)
      // starts with its first run, sparing its memory (~70 MB) where no source answers inline.
      sandbox.warm();
      // Not awaited: until the subscription is live, lookups read Redis.
      void cache?.start();
      if (roles.has("worker")) {
        workers = new RuntimeWorkers({
          connection: d.connection,
          prefixes: { sourceRun: d.keys.queuePrefix("source-run"), timers: d.keys.queuePrefix("timers") },
          concurrency: config.sourceRunConcurrency,
          runner,
          backlog,
          intake: runs,
          reads: { blocking: d.openBlocking("run-reads"), open: d.openBlocking },
          stream: (reads) => new RunStream(d.redis, d.keys, config.sourceRunStreamPerUser, d.now, reads),
          consumer: `${process.pid}-${randomUUID().slice(0, 8)}`,
          claimIdleMs: config.sandboxTimeoutMs + RUN_CLAIM_MARGIN_MS,
          logger: d.logger,
          metrics: d.metrics,
          now: d.now,
        });
        await workers.start();
      }
      if (roles.has("scheduler")) {
        scheduler = new TimerScheduler({
          redis: d.redis,
          blocking: d.blocking,
          keys: d.keys,
          sources: d.sourceStore,
          timers: d.timersQueue,
          logger: d.logger,
        });
        await scheduler.start();
      }
    },
    running: () => (workers?.isRunning() ?? true) && (scheduler?.isRunning() ?? true),
    async close() {
      await Promise.all([workers?.close(), scheduler?.close()]);
      await cache?.stop();
      sandbox.close();
      inlineSandbox.close();
    },
  };
}
