import { z } from "zod";
import { DELIVERY_ORIGINS, type DeliveryOrigin } from "../domain/delivery-plan.js";

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

/**
 * A delivery to a webhook or a workflow's trigger_url. A small payload travels with the job (the
 * summary stream keeps only 100 events and may have dropped it by delivery time); a large one is
 * stored once per event for all of its waiting deliveries (store/payloads.ts) and the job refers to
 * it by its event. Built only by delivery/jobs.ts; what `origin` and `priorAttempts` mean is
 * domain/delivery-plan.ts.
 */
export const deliveryJob = z.object({
  userId: z.string(),
  deliveryId: z.string(),
  listenerKind: z.enum(["webhook", "workflow"]),
  listenerId: z.string(),
  emitterId: z.string(),
  channel: z.string(),
  eventId: z.string(),
  /**
   * JSON text of the event as emitted; absent when it is stored once for the event (read at attempt
   * time by user, emitter, channel and event id). Jobs of versions before that always carry it.
   */
  payload: z.string().optional(),
  /** When the event was accepted (ms), for emit-to-delivered latency. */
  acceptedAtMs: z.number(),
  /**
   * Where the job comes from (fanout, direct-retry, redo, replay). Absent in jobs queued by
   * versions before it existed: delivery/jobs.ts infers it as they did (legacyOrigin).
   */
  origin: z.enum(DELIVERY_ORIGINS).optional(),
  /**
   * Attempts of the retry schedule made before this job existed: 1 after a direct first attempt
   * (delivery/direct.ts) handed the retries to the queue, else 0.
   */
  priorAttempts: z.number().int().min(0).default(0),
  /**
   * The `redo` origin as versions before `origin` marked it. Still written on redo jobs so that a
   * worker of the previous version, during a rolling upgrade, reads their attempt record first.
   */
  redo: z.literal(true).optional(),
  /**
   * Hops of the event's chain (the outbox entry's `h`; absent = 0): a `$delivery_failed` this
   * delivery causes carries them on, so a source that turns health events into deliveries that
   * fail again stops after MAX_HOPS like any source-to-source chain (docs/decisions.md "Health events").
   */
  hops: z.number().int().min(0).optional(),
});
/** A delivery job as it travels (`origin` may be absent in jobs of an older version). */
export type DeliveryJobData = z.infer<typeof deliveryJob>;
/** A delivery job as this version builds it, and reads it once its origin is known. */
export type DeliveryJob = DeliveryJobData & { origin: DeliveryOrigin };

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
    /** The timer's interval (null for a cron timer); absent in jobs of versions before the run stream. */
    intervalSeconds: z.number().nullable().optional(),
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
