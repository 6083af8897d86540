/**
 * Options every BullMQ worker of Tributary shares. A crashed process is not a failed job: jobs
 * whose worker died are taken back (stalled) without limit, and sooner than BullMQ's 30 s
 * default, so a SIGKILLed worker delays its in-flight jobs by seconds, not a minute. Locks are
 * renewed by BullMQ every lockDuration/2 while a job runs, so long attempts keep theirs.
 */
export const WORKER_RECOVERY = {
  lockDuration: 15_000,
  stalledInterval: 5_000,
  maxStalledCount: 1_000_000,
} as const;
