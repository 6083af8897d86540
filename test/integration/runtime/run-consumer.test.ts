import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../../src/observability/logger.js";
import type { SourceRunJob } from "../../../src/queue/catalog.js";
import { RunConsumer } from "../../../src/runtime/run-consumer.js";
import { RunSlots } from "../../../src/runtime/run-slots.js";
import { RunStream } from "../../../src/store/run-stream.js";
import { keySpacePerTest } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * The run consumer against real Redis, driven directly (its runs are held by the test): how many
 * entries it takes from the shard streams for the slots it has.
 */

const space = keySpacePerTest();
const SLOTS = 4;
let consumer: RunConsumer | undefined;
/** Releases the runs the test holds (close() waits for the runs in hand). */
const held: (() => void)[] = [];

afterEach(async () => {
  const closing = consumer?.close();
  while (consumer?.inFlight()) {
    for (const release of held.splice(0)) release();
    await new Promise((r) => setTimeout(r, 10));
  }
  await closing;
  consumer = undefined;
});

/** A user id whose data lives in `shard`. */
function userIn(shard: number): string {
  for (let n = 0; ; n++) if (space.keys.shardOf(`u_c${n}`) === shard) return `u_c${n}`;
}

describe("run consumer", () => {
  it("takes about as many entries as it has free slots when every shard has runs, and runs each once", async () => {
    const blocking = space.redis.duplicate();
    const stream = new RunStream(space.redis, space.keys, 100, Date.now, { blocking });
    const runs = Array.from({ length: space.keys.shards }, (_, shard) => userIn(shard)).flatMap((userId) =>
      [0, 1, 2].map((n) => ({ userId, json: JSON.stringify({ kind: "timer", userId, sourceId: `dc_${n}` }) })),
    );
    await stream.ensureGroup();
    await stream.add(runs);
    const ran: SourceRunJob[] = [];
    consumer = new RunConsumer({
      stream,
      blocking,
      consumer: "c1",
      slots: new RunSlots(SLOTS),
      claimIdleMs: 60_000,
      execute: (job) => new Promise<void>((resolve) => held.push(() => resolve(void ran.push(job)))),
      logger: createLogger("silent"),
    });
    await consumer.start();
    await waitFor(() => held.length === SLOTS, { timeoutMs: 10_000, what: "the slots to fill" });
    // Give the loop time to read more than it should, if it would.
    await new Promise((r) => setTimeout(r, 300));
    // One entry per shard at most for the first read (COUNT is per stream): not 3 of each.
    expect(consumer.inFlight()).toBeLessThanOrEqual(space.keys.shards);
    await waitFor(
      () => {
        for (const release of held.splice(0)) release();
        return ran.length === runs.length;
      },
      { timeoutMs: 20_000, intervalMs: 20, what: "every run" },
    );
    const seen = ran.map((j) => `${j.userId} ${j.sourceId}`);
    expect(new Set(seen).size).toBe(runs.length);
    expect(seen.length).toBe(runs.length);
  });
});
