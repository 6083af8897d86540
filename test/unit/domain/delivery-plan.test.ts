import { describe, expect, it } from "vitest";
import {
  type AttemptPlan,
  DELIVERY_ORIGINS,
  type DeliveryOrigin,
  JOB_STARTS,
  jobBudget,
  type JobLifecycle,
  legacyOrigin,
  mayAttemptDirectly,
  NOT_QUEUED,
  planAttempt,
  type RecordSoFar,
  readsRecord,
  type RunCounts,
} from "../../../src/domain/delivery-plan.js";

/**
 * The delivery lifecycle, rule by rule, as docs/decisions.md §Delivery states it. Each row is one
 * situation a delivery attempt can be in; the schedule has 4 attempts.
 */

const MAX_ATTEMPTS = 4;
const job = (origin: DeliveryOrigin, priorAttempts = 0): JobLifecycle => ({ origin, priorAttempts });
/** BullMQ counters of a job's nth run: n - 1 finished before it, n started (this one included). */
const nthRun = (n: number): RunCounts => ({ attemptsMade: n - 1, attemptsStarted: n });
/** A run taken over from a worker that died mid-attempt: started twice, finished none. */
const takenOver: RunCounts = { attemptsMade: 0, attemptsStarted: 2 };
const record = (status: RecordSoFar["status"], attempts: number): RecordSoFar => ({ status, attempts: Array(attempts).fill({}) });
const send = (position: number, headerAttempt = position): AttemptPlan => ({ kind: "send", position, headerAttempt });

describe("delivery plan: which attempts read the attempt record", () => {
  const rows: [string, JobLifecycle, RunCounts, boolean][] = [
    // "A delivery's first clean attempt reads no attempt record" (Hot-path costs).
    ["a direct first attempt (no job)", JOB_STARTS.fanout, NOT_QUEUED, false],
    ["a queued first attempt on its first run", JOB_STARTS.fanout, nthRun(1), false],
    // ...only those that may have been attempted before read it.
    ["a retry of a queued job (attemptsMade > 0)", JOB_STARTS.fanout, nthRun(2), true],
    ["a job taken over from a dead worker (attemptsStarted > 1)", JOB_STARTS.fanout, takenOver, true],
    ["the retries after a direct first attempt", JOB_STARTS.directRetry, nthRun(1), true],
    ["a redone fan-out's job", JOB_STARTS.redo, nthRun(1), true],
    ["a replay", JOB_STARTS.replay, nthRun(1), true],
  ];
  it.each(rows)("%s: %#", (_name, j, run, expected) => {
    expect(readsRecord(j, run)).toBe(expected);
  });
});

describe("delivery plan: what an attempt does", () => {
  const rows: [string, JobLifecycle, RunCounts, RecordSoFar | undefined, AttemptPlan][] = [
    // The first attempt, and a job's own retries, number on from the job.
    ["a first attempt is attempt 1", JOB_STARTS.fanout, NOT_QUEUED, undefined, send(1)],
    ["a job's third run is attempt 3", JOB_STARTS.fanout, nthRun(3), record("pending", 2), send(3)],
    // "A first attempt that asks for a retry becomes a delayed job ... carrying priorAttempts: 1.
    //  The schedule, the x-tributary-attempt header and the attempt log go on at attempt 2."
    ["the job after a direct attempt goes on at attempt 2", JOB_STARTS.directRetry, nthRun(1), record("pending", 1), send(2)],
    ["...and its own retry is attempt 3", JOB_STARTS.directRetry, nthRun(2), record("pending", 2), send(3)],
    ["...even when its record is missing", JOB_STARTS.directRetry, nthRun(1), undefined, send(2)],
    // "A delivery already marked delivered is not sent again" (a duplicate job, a redone fan-out).
    [
      "a delivered record stops a retry",
      JOB_STARTS.fanout,
      nthRun(2),
      record("delivered", 1),
      { kind: "skip", reason: "already delivered" },
    ],
    [
      "a delivered record stops a takeover",
      JOB_STARTS.fanout,
      takenOver,
      record("delivered", 1),
      { kind: "skip", reason: "already delivered" },
    ],
    ["a delivered record stops a redo", JOB_STARTS.redo, nthRun(1), record("delivered", 1), { kind: "skip", reason: "already delivered" }],
    [
      "a delivered record stops a replay",
      JOB_STARTS.replay,
      nthRun(1),
      record("delivered", 5),
      { kind: "skip", reason: "already delivered" },
    ],
    // "... redone through the queue only, as redo jobs that read the attempt record first and send
    //  nothing when it says delivered or failed."
    ["a failed record stops a redo", JOB_STARTS.redo, nthRun(1), record("failed", 1), { kind: "skip", reason: "already given up" }],
    ["a failed record does not stop a direct retry", JOB_STARTS.directRetry, nthRun(1), record("failed", 1), send(2)],
    ["a redo with no record is a first attempt", JOB_STARTS.redo, nthRun(1), undefined, send(1)],
    // "Where in the schedule an attempt stands is taken from the attempt log when the log is ahead
    //  of the job": a redone fan-out after a crash between a record and its retry job...
    ["a redo goes on where the log stands", JOB_STARTS.redo, nthRun(1), record("pending", 3), send(4)],
    // ...or a job taken over after its attempt was recorded but before BullMQ counted it.
    ["a takeover goes on where the log stands", JOB_STARTS.fanout, takenOver, record("pending", 1), send(2)],
    ["the job's count wins when it is ahead of the log", JOB_STARTS.fanout, nthRun(3), record("pending", 1), send(3, 2)],
    // "A replay is the exception: it starts a fresh budget, but its x-tributary-attempt still
    //  counts on from the log."
    ["a replay starts the schedule over, numbered on from the log", JOB_STARTS.replay, nthRun(1), record("pending", 4), send(1, 5)],
    ["a replay's retry is its attempt 2, numbered 6", JOB_STARTS.replay, nthRun(2), record("pending", 5), send(2, 6)],
  ];
  it.each(rows)("%s", (_name, j, run, rec, expected) => {
    expect(planAttempt(j, run, rec)).toEqual(expected);
  });

  it("gives every first clean attempt the same plan object (nothing allocated on the hot path)", () => {
    expect(planAttempt(JOB_STARTS.fanout, NOT_QUEUED, undefined)).toBe(planAttempt(JOB_STARTS.fanout, nthRun(1), undefined));
  });
});

describe("delivery plan: job budgets and direct attempts", () => {
  const rows: [string, JobLifecycle, number][] = [
    ["a queued first attempt gets the whole schedule", JOB_STARTS.fanout, MAX_ATTEMPTS],
    // "the job's retry budget is the schedule's remainder"
    ["the job after a direct attempt gets the remainder", JOB_STARTS.directRetry, MAX_ATTEMPTS - 1],
    // "If a direct attempt throws ... the delivery is queued as a redo job" (the log says where it stands).
    ["a redo gets the whole schedule (the log bounds it)", JOB_STARTS.redo, MAX_ATTEMPTS],
    // "Replaying ... with a fresh attempt budget" (SPEC §6).
    ["a replay gets a fresh budget", JOB_STARTS.replay, MAX_ATTEMPTS],
    ["a budget is never below one attempt", job("direct-retry", MAX_ATTEMPTS), 1],
  ];
  it.each(rows)("%s", (_name, j, expected) => {
    expect(jobBudget(j, MAX_ATTEMPTS)).toBe(expected);
  });

  it("lets fan-out attempt directly only the entries it read first, never a taken-over entry", () => {
    expect(DELIVERY_ORIGINS.filter(mayAttemptDirectly)).toEqual(["fanout"]);
  });

  it("starts the job after a direct attempt where that attempt (always attempt 1) left the schedule", () => {
    const direct = planAttempt(JOB_STARTS.fanout, NOT_QUEUED, undefined);
    expect(direct.kind === "send" && direct.position).toBe(JOB_STARTS.directRetry.priorAttempts);
  });
});

describe("delivery plan: jobs queued by the previous version (no origin)", () => {
  const rows: [string, { redo?: true; priorAttempts?: number }, boolean, DeliveryOrigin][] = [
    ["a plain job is a first attempt from fan-out", {}, false, "fanout"],
    ["a job with priorAttempts continues a direct attempt", { priorAttempts: 1 }, false, "direct-retry"],
    ["a job marked redo is a redo", { redo: true }, false, "redo"],
    ["a job with an id of its own (<delivery id>-rN) is a replay", {}, true, "replay"],
    ["priorAttempts 0 is still a first attempt", { priorAttempts: 0 }, false, "fanout"],
  ];
  it.each(rows)("%s", (_name, data, ownJobId, expected) => {
    expect(legacyOrigin(data, ownJobId)).toBe(expected);
  });
});
