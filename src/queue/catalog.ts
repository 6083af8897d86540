import { z } from "zod";

/**
 * Every queue and job type, declared once. Producers build payloads through these schemas and
 * consumers parse them, so a job written by an older or newer process fails loudly instead of
 * half-working.
 */
export const QUEUES = {
  /** Webhook and workflow deliveries (signed POSTs with retries). */
  delivery: "delivery",
  /** Source runs: HTTP requests without a custom response, timer ticks, delivered events. */
  sourceRun: "source-run",
  /** Background chores: asynchronous event deletion. */
  maintenance: "maintenance",
  /** Timer ticks produced by BullMQ job schedulers (owned by the scheduler role). */
  timers: "timers",
} as const;
export type QueueName = (typeof QUEUES)[keyof typeof QUEUES];

export const listenerKind = z.enum(["webhook", "workflow", "source"]);
export type ListenerKind = z.infer<typeof listenerKind>;

/** A delivery to a webhook or a workflow's trigger_url. The payload travels with the job because
 * the summary stream keeps only 100 events and may have dropped it by delivery time. */
export const deliveryJob = z.object({
  userId: z.string(),
  deliveryId: z.string(),
  listenerKind: z.enum(["webhook", "workflow"]),
  listenerId: z.string(),
  emitterId: z.string(),
  channel: z.string(),
  eventId: z.string(),
  /** JSON text of the event as emitted. */
  payload: z.string(),
  /** When the event was accepted (ms), for emit-to-delivered latency. */
  acceptedAtMs: z.number(),
  /**
   * Added by a fan-out redone after a crash (an outbox entry taken over): the delivery may be
   * done already, so the worker reads its attempt record first.
   */
  redo: z.literal(true).optional(),
  /**
   * Attempts made before this job existed: fan-out made the first attempt directly
   * (delivery/direct.ts) and handed the retries to the queue. Counts toward the retry schedule.
   */
  priorAttempts: z.number().int().min(0).optional(),
});
export type DeliveryJob = z.infer<typeof deliveryJob>;

/** What a source run starts from. */
export const sourceRunJob = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("http"),
    userId: z.string(),
    sourceId: z.string(),
    request: z.object({
      method: z.string(),
      path: z.string(),
      query: z.record(z.string(), z.unknown()),
      headers: z.record(z.string(), z.string()),
      bodyRaw: z.string(),
    }),
    acceptedAtMs: z.number(),
  }),
  z.object({
    kind: z.literal("timer"),
    userId: z.string(),
    sourceId: z.string(),
  }),
  z.object({
    kind: z.literal("event"),
    userId: z.string(),
    sourceId: z.string(),
    emitterId: z.string(),
    channel: z.string(),
    eventId: z.string(),
    payload: z.string(),
    /** Source-to-source hops so far; chains stop after 16. */
    hops: z.number().int().min(0),
    acceptedAtMs: z.number(),
  }),
]);
export type SourceRunJob = z.infer<typeof sourceRunJob>;

export const maintenanceJob = z.object({
  kind: z.literal("delete-events"),
  userId: z.string(),
  emitterId: z.string(),
  channel: z.string(),
  startId: z.string().nullable(),
  endId: z.string().nullable(),
});
export type MaintenanceJob = z.infer<typeof maintenanceJob>;

export const timerJob = z.object({ userId: z.string(), sourceId: z.string(), intervalSeconds: z.number().nullable().optional() });
export type TimerJob = z.infer<typeof timerJob>;
