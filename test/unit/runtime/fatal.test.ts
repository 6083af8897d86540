import { Writable } from "node:stream";
import { pino } from "pino";
import { describe, expect, it, vi } from "vitest";
import { exitOnCatastrophicError } from "../../../src/runtime/fatal.js";

describe("exitOnCatastrophicError", () => {
  it("logs at fatal with isolated-vm's message, then ends the process, only once", () => {
    const lines: string[] = [];
    const logger = pino(
      { level: "info" },
      new Writable({
        write(chunk, _enc, done) {
          lines.push(String(chunk));
          done();
        },
      }),
    );
    const end = vi.fn<() => void>();
    const handler = exitOnCatastrophicError(logger, end);
    handler("Catastrophic out-of-memory error");
    handler("Script failed to terminate");
    expect(end).toHaveBeenCalledTimes(1);
    const logged = lines.map((l) => JSON.parse(l));
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 60, message: "Catastrophic out-of-memory error" });
  });
});
