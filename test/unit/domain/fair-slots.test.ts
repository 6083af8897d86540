import { describe, expect, it } from "vitest";
import { type Claim, destinationKey, FairSlots, putOffDelayMs, slotWaitMs } from "../../../src/domain/fair-slots.js";

const claim = (user: string, destination = "http://a", pool = "direct"): Claim => ({ pool, user, destination });

describe("FairSlots", () => {
  it("keeps each pool, user and destination within its limit, and names the limit that blocks", () => {
    const s = new FairSlots<string>({ pools: { direct: 3 }, perUser: 2, perDestination: 2 });
    expect(s.tryStart(claim("a", "http://x"), 0)).toBeDefined();
    expect(s.tryStart(claim("a", "http://y"), 0)).toBeDefined();
    // User a is at 2.
    expect(s.tryStart(claim("a", "http://z"), 0)).toBeUndefined();
    expect(s.blocker(claim("a", "http://z"))).toBe("user");
    // Destination x is at 1 of 2: user b may use it, then x is full for everyone.
    expect(s.tryStart(claim("b", "http://x"), 0)).toBeDefined();
    expect(s.blocker(claim("c", "http://x"))).toBe("pool"); // 3 of 3 direct slots taken
    // The queue pool has no total here: only the user and destination caps apply.
    expect(s.blocker(claim("c", "http://x", "queue"))).toBe("destination");
    expect(s.tryStart(claim("c", "http://w", "queue"), 0)).toBeDefined();
    expect(s.inFlight("direct")).toBe(3);
    expect(s.inFlight("queue")).toBe(1);
  });

  it("treats 0 as no cap", () => {
    const s = new FairSlots<string>({ pools: {}, perUser: 0, perDestination: 0 });
    for (let i = 0; i < 500; i++) expect(s.tryStart(claim("a"), 0)).toBeDefined();
  });

  it("frees every count on finish (nothing left tracked)", () => {
    const s = new FairSlots<string>({ pools: { direct: 2 }, perUser: 1, perDestination: 1 });
    const held = s.tryStart(claim("a"), 0);
    expect(held).toBeDefined();
    expect(s.tryStart(claim("a"), 0)).toBeUndefined();
    s.finish(held as NonNullable<typeof held>);
    expect(s.tracked).toBe(0);
    expect(s.tryStart(claim("a"), 0)).toBeDefined();
  });

  it("hands freed slots out round-robin by user, not first come first served", () => {
    const s = new FairSlots<string>({ pools: { direct: 1 }, perUser: 0, perDestination: 0 });
    let held = s.tryStart(claim("seed"), 0);
    // The noisy user queues five waiters before the quiet ones queue one each.
    for (let i = 1; i <= 5; i++) s.wait(claim("noisy"), `noisy${i}`);
    s.wait(claim("quiet1"), "quiet1");
    s.wait(claim("quiet2"), "quiet2");
    const order: string[] = [];
    while (held) {
      s.finish(held);
      const granted = s.grant(0);
      expect(granted.length).toBeLessThanOrEqual(1);
      order.push(...granted.map((g) => g.value));
      held = granted[0]?.held;
    }
    expect(order).toEqual(["noisy1", "quiet1", "quiet2", "noisy2", "noisy3", "noisy4", "noisy5"]);
    expect(s.waiters).toBe(0);
  });

  it("lets a user's later waiter pass one blocked by its destination, and keeps a user's order otherwise", () => {
    const s = new FairSlots<string>({ pools: {}, perUser: 0, perDestination: 1 });
    const x = s.tryStart(claim("other", "http://x"), 0);
    const y = s.tryStart(claim("other", "http://y"), 0);
    s.wait(claim("a", "http://x"), "a-x");
    s.wait(claim("a", "http://y"), "a-y");
    // A new claim of user a does not jump its own waiters, though its destination is free.
    expect(s.tryStart(claim("a", "http://z"), 0)).toBeUndefined();
    s.finish(y as NonNullable<typeof y>);
    expect(s.grant(0).map((g) => g.value)).toEqual(["a-y"]);
    s.finish(x as NonNullable<typeof x>);
    expect(s.grant(0).map((g) => g.value)).toEqual(["a-x"]);
  });

  it("forgets a cancelled waiter; cancelling a granted one answers false", () => {
    const s = new FairSlots<string>({ pools: { direct: 1 }, perUser: 0, perDestination: 0 });
    const held = s.tryStart(claim("seed"), 0) as NonNullable<ReturnType<typeof s.tryStart>>;
    s.wait(claim("a"), "gone");
    s.wait(claim("b"), "stays");
    expect(s.cancel(claim("a"), "gone")).toBe(true);
    s.finish(held);
    expect(s.grant(0).map((g) => g.value)).toEqual(["stays"]);
    expect(s.cancel(claim("b"), "stays")).toBe(false);
  });

  it("knows when the oldest attempt under each limit started", () => {
    const s = new FairSlots<string>({ pools: { direct: 10 }, perUser: 10, perDestination: 10 });
    const first = s.tryStart(claim("a", "http://x"), 100) as NonNullable<ReturnType<typeof s.tryStart>>;
    s.tryStart(claim("b", "http://x"), 200);
    s.tryStart(claim("b", "http://y"), 300);
    expect(s.oldestStart(claim("b", "http://y"), "pool")).toBe(100);
    expect(s.oldestStart(claim("b", "http://y"), "user")).toBe(200);
    expect(s.oldestStart(claim("c", "http://y"), "destination")).toBe(300);
    s.finish(first);
    expect(s.oldestStart(claim("c", "http://x"), "destination")).toBe(200);
    expect(s.oldestStart(claim("c", "http://q"), "destination")).toBeUndefined();
  });
});

describe("slotWaitMs", () => {
  it("waits until the oldest attempt would count as slow, and not at all once it does", () => {
    expect(slotWaitMs(1000, 1000, 100)).toBe(100);
    expect(slotWaitMs(1000, 1060, 100)).toBe(40);
    expect(slotWaitMs(1000, 1100, 100)).toBe(0);
    expect(slotWaitMs(1000, 9000, 100)).toBe(0);
    expect(slotWaitMs(undefined, 9000, 100)).toBe(100);
  });
});

describe("destinationKey", () => {
  it("is the URL's origin: webhooks on one host share it, other ports and schemes do not", () => {
    expect(destinationKey("https://Hooks.Example.com/a?x=1", "wh_1")).toBe("https://hooks.example.com");
    expect(destinationKey("https://hooks.example.com:443/b", "wh_2")).toBe("https://hooks.example.com");
    expect(destinationKey("http://hooks.example.com/a", "wh_3")).toBe("http://hooks.example.com");
    expect(destinationKey("https://hooks.example.com:8443/a", "wh_4")).toBe("https://hooks.example.com:8443");
  });

  it("falls back to the listener for a missing or unparsable URL", () => {
    expect(destinationKey(undefined, "wh_1")).toBe("listener:wh_1");
    expect(destinationKey(null, "p_1")).toBe("listener:p_1");
    expect(destinationKey("not a url", "wh_2")).toBe("listener:wh_2");
  });
});

describe("putOffDelayMs", () => {
  it("starts near 250 ms, doubles per put-off up to 8 s, spread ±50 %", () => {
    expect(putOffDelayMs(0, () => 0.5)).toBe(250);
    expect(putOffDelayMs(1, () => 0.5)).toBe(500);
    expect(putOffDelayMs(5, () => 0.5)).toBe(8000);
    expect(putOffDelayMs(50, () => 0.5)).toBe(8000);
    expect(putOffDelayMs(0, () => 0)).toBe(125);
    expect(putOffDelayMs(0, () => 0.999)).toBe(375);
  });
});
