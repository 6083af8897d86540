import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { Shutdown } from "../../../src/app/shutdown.js";

const silent = pino({ level: "silent" });

describe("Shutdown", () => {
  it("runs the steps in the written phase order, whatever order they were registered in", async () => {
    const done: string[] = [];
    const s = new Shutdown(1000, silent);
    s.on("redis", "quit", () => done.push("redis"));
    s.on("queues", "close queues", () => done.push("queues"));
    s.on("workers", "drain", async () => {
      await new Promise((r) => setTimeout(r, 20));
      done.push("workers");
    });
    s.on("http", "stop listening", () => done.push("http"));
    s.on("resources", "sender", () => done.push("resources"));
    expect(s.plan()).toEqual(["http:stop listening", "workers:drain", "resources:sender", "queues:close queues", "redis:quit"]);
    await s.run();
    expect(done).toEqual(["http", "workers", "resources", "queues", "redis"]);
  });

  it("goes on past a step that fails or outlives the deadline, and runs once", async () => {
    const done: string[] = [];
    const s = new Shutdown(50, silent);
    s.on("http", "throws", () => {
      throw new Error("boom");
    });
    s.on("workers", "hangs", () => new Promise(() => {}));
    s.on("redis", "quit", () => done.push("redis"));
    await Promise.all([s.run(), s.run()]);
    await s.run();
    expect(done).toEqual(["redis"]);
  });
});
