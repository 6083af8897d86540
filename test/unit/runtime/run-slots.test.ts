import { describe, expect, it } from "vitest";
import { RunSlots } from "../../../src/runtime/run-slots.js";

describe("RunSlots", () => {
  it("grants at most `size` slots; a release passes the slot to the next waiter", async () => {
    const slots = new RunSlots(2);
    await slots.take("stream");
    await slots.take("queue");
    expect(slots.available()).toBe(0);
    let third = false;
    const waiting = slots.take("stream").then(() => {
      third = true;
    });
    await Promise.resolve();
    expect(third).toBe(false);
    slots.release();
    await waiting;
    expect(third).toBe(true);
    expect(slots.available()).toBe(0);
    slots.release();
    slots.release();
    expect(slots.available()).toBe(2);
  });

  it("serves waiting stream runs first, but a waiting BullMQ job at least once in every streamPerQueue + 1 grants", async () => {
    const slots = new RunSlots(1, 2);
    await slots.take("stream");
    const granted: string[] = [];
    const waits = [
      ...["q1", "q2"].map((n) => slots.take("queue").then(() => granted.push(n))),
      ...["s1", "s2", "s3", "s4", "s5"].map((n) => slots.take("stream").then(() => granted.push(n))),
    ];
    for (let i = 0; i < waits.length; i++) {
      slots.release();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(waits);
    expect(granted).toEqual(["s1", "s2", "q1", "s3", "s4", "q2", "s5"]);
  });
});
