/**
 * The delivery lifecycle (docs/decisions.md §Delivery) in one pure module: where a delivery job
 * comes from, what each attempt reads, skips and counts, and how many attempts each job gets. The
 * attempter (delivery/attempt.ts) asks this module and acts; nothing else infers a delivery's mode.
 *
 * A delivery is made of attempts on one retry schedule (`DELIVERY_RETRY_SCHEDULE`: attempt 1,
 * then one attempt per delay). Its attempts come from jobs of four origins, as svix's `MessageTask`
 * carries its `trigger_type`:
 *
 * - `fanout`: the delivery's first attempt, made by fan-out directly (delivery/direct.ts) or as a
 *   queued job when no direct slot was free;
 * - `direct-retry`: the rest of the schedule after a direct first attempt asked for a retry;
 * - `redo`: fan-out redone for an outbox entry taken over from a dead consumer, or a direct
 *   attempt that failed unexpectedly; the delivery may be done already;
 * - `replay`: a failed delivery replayed through the API, with a fresh retry budget.
 *
 * Each job also carries `priorAttempts`, its position in the schedule when it was added (as svix's
 * `attempt_count`); BullMQ counts the job's own attempts on top.
 */

export const DELIVERY_ORIGINS = ["fanout", "direct-retry", "redo", "replay"] as const;
export type DeliveryOrigin = (typeof DELIVERY_ORIGINS)[number];

/** What a delivery job says about its place in the lifecycle. */
export interface JobLifecycle {
  readonly origin: DeliveryOrigin;
  /** Attempts of the schedule made before this job existed. */
  readonly priorAttempts: number;
}

/** Where each kind of job starts. */
export const JOB_STARTS = {
  /** A delivery's first attempt, from fan-out. */
  fanout: { origin: "fanout", priorAttempts: 0 },
  /** After a direct first attempt (always attempt 1: it reads no record) asked for a retry. */
  directRetry: { origin: "direct-retry", priorAttempts: 1 },
  /** A redone fan-out, or a direct attempt that threw: the attempt log says where it stands. */
  redo: { origin: "redo", priorAttempts: 0 },
  /** A replay: a fresh budget (the attempt log still numbers its attempts on). */
  replay: { origin: "replay", priorAttempts: 0 },
} as const satisfies Record<string, JobLifecycle>;

/**
 * BullMQ's counters for the attempt being made. A direct attempt has no job: NOT_QUEUED.
 */
export interface RunCounts {
  /** Attempts of this job that finished (BullMQ `attemptsMade`). */
  readonly attemptsMade: number;
  /**
   * Attempts of this job that started, this one included (BullMQ `attemptsStarted`): more than
   * `attemptsMade + 1` once the job was taken over from a worker that died mid-attempt.
   */
  readonly attemptsStarted?: number;
  /** The job's id (BullMQ `id`): where a delivery waiting on an open circuit is parked. */
  readonly id?: string | undefined;
}

/** The counters of an attempt made without a job (fan-out's direct first attempt). */
export const NOT_QUEUED: RunCounts = Object.freeze({ attemptsMade: 0, attemptsStarted: 0 });

/**
 * The origin of a job written by a version that did not record it (jobs queued before an
 * upgrade), inferred from the signals that version used: a replay has a job id of its own
 * (`<delivery id>-r<n>`), a redone fan-out is marked `redo`, a retry after a direct first attempt
 * carries `priorAttempts`.
 */
export function legacyOrigin(job: { readonly redo?: true; readonly priorAttempts?: number }, ownJobId: boolean): DeliveryOrigin {
  if (ownJobId) return "replay";
  if (job.redo === true) return "redo";
  if ((job.priorAttempts ?? 0) > 0) return "direct-retry";
  return "fanout";
}

/** Attempts a job may make (its BullMQ `attempts`): what is left of the schedule where it starts. */
export function jobBudget(job: JobLifecycle, maxAttempts: number): number {
  return Math.max(1, maxAttempts - job.priorAttempts);
}

/**
 * Whether fan-out may make a delivery's first attempt itself. Only for entries it read first: a
 * taken-over entry is redone through the queue, whose jobs read the attempt record first.
 */
export function mayAttemptDirectly(origin: DeliveryOrigin): boolean {
  return origin === "fanout";
}

/**
 * Whether the attempt reads the delivery's record before sending. The record can only exist when
 * the delivery may have been attempted before: a retry (of this job, or after a direct first
 * attempt), a job taken over from a dead worker (started more often than finished), a replay or a
 * redone fan-out. A first clean attempt from fan-out skips the read: its record is created when it
 * ends, so with the listener cache it costs no Redis read at all.
 */
export function readsRecord(job: JobLifecycle, run: RunCounts): boolean {
  return job.origin !== "fanout" || run.attemptsMade > 0 || (run.attemptsStarted ?? 0) > 1;
}

/** What an attempt needs of the delivery's record (a DeliveryRecord is one). */
export interface RecordSoFar {
  readonly status: "pending" | "delivered" | "failed";
  readonly attempts: readonly unknown[];
}

export type AttemptPlan =
  | { readonly kind: "skip"; readonly reason: "already delivered" | "already given up" }
  | {
      readonly kind: "send";
      /** Where the attempt stands in the retry schedule (1-based): what the classifier counts. */
      readonly position: number;
      /** `x-tributary-attempt`: numbered like the attempt log, so both agree across stalls and replays. */
      readonly headerAttempt: number;
    };

const SKIP_DELIVERED: AttemptPlan = Object.freeze({ kind: "skip", reason: "already delivered" });
const SKIP_GIVEN_UP: AttemptPlan = Object.freeze({ kind: "skip", reason: "already given up" });
/** The plan of every first clean attempt, shared: nothing is allocated on the hot path. */
const FIRST_ATTEMPT: AttemptPlan = Object.freeze({ kind: "send", position: 1, headerAttempt: 1 });

/**
 * What the attempt does, given the record it read (undefined when it read none, or there was none).
 * - A delivery already delivered is not sent again (a duplicate job, a redone fan-out).
 * - A redone fan-out also stops at "failed": the first fan-out's attempt gave up (a job would have
 *   lingered as failed and kept the redo from being added; a direct attempt leaves no job).
 * - The schedule goes on where the attempt log stands when the log is ahead of the job (a fan-out
 *   redone after a crash between an attempt's record and its retry job, a job taken over after its
 *   attempt was recorded but before BullMQ counted it), instead of starting over.
 * - A replay is the exception: it starts a fresh budget, while its header still counts on from
 *   the log.
 */
export function planAttempt(job: JobLifecycle, run: RunCounts, record: RecordSoFar | undefined): AttemptPlan {
  if (record?.status === "delivered") return SKIP_DELIVERED;
  if (job.origin === "redo" && record?.status === "failed") return SKIP_GIVEN_UP;
  const scheduled = job.priorAttempts + run.attemptsMade + 1;
  if (!record) return scheduled === 1 ? FIRST_ATTEMPT : { kind: "send", position: scheduled, headerAttempt: scheduled };
  const logged = record.attempts.length + 1;
  return { kind: "send", position: job.origin === "replay" ? scheduled : Math.max(scheduled, logged), headerAttempt: logged };
}
