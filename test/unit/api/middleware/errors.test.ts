import { ReplyError } from "ioredis";
import { describe, expect, it } from "vitest";
import { toAppError } from "../../../../src/api/middleware/errors.js";
import { UnavailableError } from "../../../../src/domain/errors.js";

describe("toAppError on Redis Cluster redirections", () => {
  it("answers 503 (retry) for a MOVED or ASK that ioredis did not follow (an auto-pipeline during a failover)", () => {
    for (const message of ["MOVED 1217 127.0.0.1:36769", "ASK 914 127.0.0.1:36769"]) {
      const err = toAppError(new ReplyError(message));
      expect(err, message).toBeInstanceOf(UnavailableError);
      expect(err?.status).toBe(503);
    }
  });

  it("leaves other errors that merely mention the words alone", () => {
    expect(toAppError(new Error("the user MOVED their data"))).toBeUndefined();
  });
});
