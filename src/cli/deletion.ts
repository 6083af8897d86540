import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { Registry } from "prom-client";
import type { Config } from "../config/schema.js";
import { slugify } from "../domain/slug.js";
import { Ingest } from "../events/ingest.js";
import { EventStore } from "../events/store.js";
import { createGuardedAgent } from "../net/guarded-agent.js";
import type { Logger } from "../observability/logger.js";
import { createMetrics } from "../observability/metrics.js";
import { QUEUES } from "../queue/catalog.js";
import { createAnalyzer } from "../runtime/analyzer.js";
import { logSandboxCrash } from "../runtime/fatal.js";
import { createRuntime } from "../runtime/index.js";
import { createComponentFetcher } from "../services/component-fetcher.js";
import { ComponentService } from "../services/components.js";
import { SourceService } from "../services/sources.js";
import { UserDeletion } from "../services/user-deletion.js";
import { WorkflowService } from "../services/workflows.js";
import { ComponentStore } from "../store/components.js";
import type { StoreContext } from "../store/context.js";
import { SourceStore } from "../store/sources.js";
import { SubscriptionStore } from "../store/subscriptions.js";
import type { UserStore } from "../store/users.js";
import { WorkflowStore } from "../store/workflows.js";

/**
 * The CLI's `users delete`: the same UserDeletion the admin API uses, over the same source
 * lifecycle (deactivate hooks run in a local sandbox, timers are handed to the scheduler role
 * through its control stream). The graph mirrors daemon.ts minus HTTP and workers; nothing here
 * starts a worker or listens.
 */
export interface CliDeletion {
  readonly deletion: UserDeletion;
  close(): Promise<void>;
}

export function createCliDeletion(d: {
  config: Config;
  redis: Redis;
  ctx: StoreContext;
  users: UserStore;
  logger: Logger;
  registryDir: string;
}): CliDeletion {
  const { config, redis, ctx, logger } = d;
  const keys = ctx.keys;
  const onSandboxCrash = logSandboxCrash(logger);
  const agent = createGuardedAgent({ allowPrivate: config.allowPrivateDestinations });
  const metrics = createMetrics(new Registry());
  const analyzer = createAnalyzer(config, onSandboxCrash);
  const fetcher = createComponentFetcher({ agent, timeoutMs: config.componentFetchTimeoutMs, maxBytes: config.componentFetchMaxBytes });
  const components = new ComponentService(new ComponentStore(ctx), analyzer, fetcher, d.registryDir);
  const subscriptions = new SubscriptionStore(ctx);
  const sourceStore = new SourceStore(ctx);
  const events = new EventStore(redis, keys);
  const workflows = new WorkflowService(new WorkflowStore(ctx), subscriptions, events);
  const queueOpts = { connection: redis, prefix: keys.bullPrefix };
  const sourceRunQueue = new Queue(QUEUES.sourceRun, queueOpts);
  const timersQueue = new Queue(QUEUES.timers, queueOpts);
  const runtime = createRuntime({
    config,
    logger,
    metrics,
    redis,
    blocking: redis,
    keys,
    connection: redis,
    prefix: keys.bullPrefix,
    agent,
    users: d.users,
    sourceStore,
    components,
    ingest: new Ingest(events, workflows, metrics, Date.now, ctx.randomBytes),
    sourceRunQueue,
    timersQueue,
    now: Date.now,
    randomBytes: ctx.randomBytes,
    onSandboxCrash,
  });
  const sources = new SourceService(sourceStore, components, subscriptions, runtime.lifecycle, {
    publicUrl: config.publicUrl,
    timerMinIntervalSeconds: config.timerMinIntervalSeconds,
    now: Date.now,
    randomBytes: (n) => randomBytes(n),
    slugify,
  });
  return {
    deletion: new UserDeletion(d.users, sourceStore, sources, logger),
    async close() {
      await runtime.close();
      analyzer.close();
      await Promise.all([sourceRunQueue.close(), timersQueue.close()]);
      await agent.close().catch(() => {});
    },
  };
}
