import { describe, expect, it } from "vitest";
import { type Batch, eachMessage, MessageBatcher } from "../../../../src/runtime/sandbox/sandbox-ipc.js";

type Msg = { t: "a" | "b"; n: number };

/** A batcher whose writes are recorded; `done` is called when the test says so. */
function recorder() {
  const writes: (Msg | Batch<Msg>)[] = [];
  const pending: (() => void)[] = [];
  const batcher = new MessageBatcher<Msg>((msg, done) => {
    writes.push(msg);
    pending.push(done);
  });
  return {
    writes,
    batcher,
    finishWrites: () => {
      for (const done of pending.splice(0)) done();
    },
  };
}

const turn = () => new Promise((r) => setImmediate(r));

describe("MessageBatcher", () => {
  it("sends the messages of one turn as one batch, in order, and a lone message as itself", async () => {
    const { writes, batcher } = recorder();
    void batcher.send({ t: "a", n: 1 });
    void batcher.send({ t: "b", n: 2 });
    void batcher.send({ t: "a", n: 3 });
    expect(writes).toEqual([]);
    await turn();
    expect(writes).toEqual([
      {
        t: "batch",
        msgs: [
          { t: "a", n: 1 },
          { t: "b", n: 2 },
          { t: "a", n: 3 },
        ],
      },
    ]);
    void batcher.send({ t: "b", n: 4 });
    await turn();
    expect(writes[1]).toEqual({ t: "b", n: 4 });
    expect(writes).toHaveLength(2);
  });

  it("resolves each send once its write is done", async () => {
    const { batcher, finishWrites } = recorder();
    const settled: number[] = [];
    void batcher.send({ t: "a", n: 1 }).then(() => settled.push(1));
    void batcher.send({ t: "a", n: 2 }).then(() => settled.push(2));
    await turn();
    await turn();
    expect(settled).toEqual([]);
    finishWrites();
    await turn();
    expect(settled).toEqual([1, 2]);
  });

  it("eachMessage hands over a batch's messages in order, and a lone message", () => {
    const seen: number[] = [];
    eachMessage<Msg>(
      {
        t: "batch",
        msgs: [
          { t: "a", n: 1 },
          { t: "b", n: 2 },
        ],
      },
      (m) => seen.push(m.n),
    );
    eachMessage<Msg>({ t: "a", n: 3 }, (m) => seen.push(m.n));
    expect(seen).toEqual([1, 2, 3]);
  });
});
