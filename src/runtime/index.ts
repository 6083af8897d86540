import type { ConnectionOptions, Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { Middleware } from "koa";
import type { Agent } from "undici";
import type { Config, Role } from "../config/schema.js";
import type { Ingest } from "../events/ingest.js";
import type { EventStore } from "../events/store.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import type { ComponentService } from "../services/components.js";
import { noLifecycle, type SourceLifecycle } from "../services/sources.js";
import type { Keys } from "../store/keys.js";
import type { SourceStore } from "../store/sources.js";

export interface RuntimeDeps {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  redis: Redis;
  keys: Keys;
  connection: ConnectionOptions;
  prefix: string;
  agent: Agent;
  sourceStore: SourceStore;
  components: ComponentService;
  ingest: Ingest;
  events: EventStore;
  sourceRunQueue: Queue;
  timersQueue: Queue;
}

/** The source runtime (SPEC §5) as the rest of the daemon sees it. */
export interface Runtime {
  /** Hooks and timers around a source's life. */
  readonly lifecycle: SourceLifecycle;
  /** HTTP source endpoints under /e/<token>. */
  readonly endpoints: Middleware | undefined;
  /** Starts the workers (worker role) and the timer scheduler (scheduler role). */
  start(roles: ReadonlySet<Role>): Promise<void>;
  healthy(): boolean;
  close(): Promise<void>;
}

/** Placeholder until the runtime lands: sources are stored but never run. */
export function createRuntime(_deps: RuntimeDeps): Runtime {
  return {
    lifecycle: noLifecycle,
    endpoints: undefined,
    start: async () => {},
    healthy: () => true,
    close: async () => {},
  };
}
