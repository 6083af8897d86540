import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Slots } from "../../../src/delivery/direct.js";

/** The bounded semaphore behind direct delivery: pure logic, timers faked. */
describe("Slots", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("hands out at most `size` slots, and a released slot can be taken again", () => {
    const slots = new Slots(2);
    expect([slots.tryAcquire(), slots.tryAcquire(), slots.tryAcquire()]).toEqual([true, true, false]);
    expect(slots.inUse).toBe(2);
    slots.release();
    expect(slots.inUse).toBe(1);
    expect(slots.tryAcquire()).toBe(true);
    expect(slots.tryAcquire()).toBe(false);
  });

  it("gives a released slot to the oldest waiter, without ever exceeding the size", async () => {
    const slots = new Slots(1);
    expect(slots.tryAcquire()).toBe(true);
    const order: string[] = [];
    const first = slots.acquire(100).then((ok) => order.push(`first ${ok}`));
    const second = slots.acquire(100).then((ok) => order.push(`second ${ok}`));
    slots.release();
    await first;
    expect(order).toEqual(["first true"]);
    expect(slots.inUse).toBe(1);
    expect(slots.tryAcquire()).toBe(false); // the slot passed to the waiter, not back to the pool
    slots.release();
    await second;
    expect(order).toEqual(["first true", "second true"]);
    slots.release();
    expect(slots.inUse).toBe(0);
  });

  it("answers false when no slot frees within the wait, and forgets that waiter", async () => {
    const slots = new Slots(1);
    slots.tryAcquire();
    const late = slots.acquire(50);
    await vi.advanceTimersByTimeAsync(49);
    let settled: boolean | undefined;
    void late.then((ok) => {
      settled = ok;
    });
    await Promise.resolve();
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(await late).toBe(false);
    // The timed-out waiter does not swallow the next release.
    slots.release();
    expect(slots.inUse).toBe(0);
    expect(await slots.acquire(0)).toBe(true);
  });

  it("never waits for a zero wait, and never goes below zero on extra releases", async () => {
    const slots = new Slots(1);
    slots.tryAcquire();
    expect(await slots.acquire(0)).toBe(false);
    slots.release();
    slots.release();
    expect(slots.inUse).toBe(0);
    expect(slots.tryAcquire()).toBe(true);
    expect(slots.tryAcquire()).toBe(false);
  });
});
