import { describe, expect, it } from "vitest";
import { CircuitBreaker } from "../../../src/delivery/circuit.js";
import { createLogger } from "../../../src/observability/logger.js";

/**
 * Releasing the deliveries parked on a circuit that closed: a job that is no longer delayed (BullMQ
 * promoted it when its delay ended, or it runs) is checked against the active list only. Its full
 * state would search the wait list, which after an outage holds the whole released backlog: a cost
 * per released job that grew with the backlog.
 */
describe("CircuitBreaker.release", () => {
  it("asks only whether a job that is not delayed is running, never for its full state", async () => {
    const calls = { promote: 0, isActive: 0, getState: 0 };
    const jobs = new Map(
      ["a", "b", "c"].map((id) => [
        id,
        {
          async promote() {
            calls.promote++;
            throw new Error(`Job ${id} is not in the delayed state`);
          },
          async isActive() {
            calls.isActive++;
            return false;
          },
          async getState() {
            calls.getState++;
            return "waiting" as const;
          },
        },
      ]),
    );
    const breaker = new CircuitBreaker({
      store: {
        admit: async () => ({ admission: { kind: "send" }, clean: true }),
        record: async () => ({ released: [] }),
        discard: async () => [],
      },
      jobs: { getJob: async (id: string) => jobs.get(id) },
      deliveryTimeoutMs: 1000,
      logger: createLogger("silent"),
    });
    await breaker.release(["a", "b", "c"]);
    expect(calls.promote).toBe(3);
    expect(calls.isActive).toBe(3);
    expect(calls.getState).toBe(0);
  });

  it("tries a job again while it is still running the attempt that will delay it", async () => {
    let active = true;
    let promoted = false;
    const job = {
      async promote() {
        if (active) throw new Error("not delayed");
        promoted = true;
      },
      async isActive() {
        const was = active;
        active = false;
        return was;
      },
    };
    const breaker = new CircuitBreaker({
      store: {
        admit: async () => ({ admission: { kind: "send" }, clean: true }),
        record: async () => ({ released: [] }),
        discard: async () => [],
      },
      jobs: { getJob: async () => job },
      deliveryTimeoutMs: 1000,
      logger: createLogger("silent"),
    });
    await breaker.release(["x"]);
    expect(promoted).toBe(true);
  });
});
