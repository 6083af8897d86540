import type { RedisClient } from "./context.js";
import type { DedupeState } from "../domain/dedupe.js";
import { parseStored } from "./context.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { COMPARE_AND_SET } from "./scripts/compare-and-set.js";

/** Rounds of re-reading before giving up (each means another run of the source changed the state meanwhile). */
const MAX_ROUNDS = 50;

/**
 * A source's dedupe state (SPEC §5), updated atomically: two runs of one source may finish at the
 * same time (queued runs work in parallel), and each must see the ids the other kept, or both would
 * emit the same id.
 */
export class DedupeStateStore {
  private readonly compareAndSet: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {
    this.compareAndSet = defineScript(redis, COMPARE_AND_SET);
  }

  /**
   * Applies `step` to the state and stores what it returns, as one atomic change: when another run
   * changed the state between the read and the write, the state is read again and `step` runs
   * again on it. Returns `step`'s result of the round that was stored.
   */
  async update<T>(userId: string, sourceId: string, step: (state: DedupeState) => { state: DedupeState; result: T }): Promise<T> {
    const key = this.keys.sourceDedupe(userId, sourceId);
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const raw = await this.redis.get(key);
      const { state, result } = step(parseStored<DedupeState>(raw) ?? {});
      const stored = await this.compareAndSet([key], [raw ?? "", JSON.stringify(state)]);
      if (Number(stored) === 1) return result;
    }
    throw new Error(`dedupe state of ${sourceId} kept changing; gave up after ${MAX_ROUNDS} rounds`);
  }
}
