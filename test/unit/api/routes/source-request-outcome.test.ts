import { describe, expect, it } from "vitest";
import { requestOutcome } from "../../../../src/api/routes/source-endpoints.js";
import {
  NotFoundError,
  PayloadTooLargeError,
  SourceRunFailedError,
  TooManyRequestsError,
  UnauthorizedError,
  UnavailableError,
  ValidationError,
} from "../../../../src/domain/errors.js";

describe("requestOutcome (the label of tributary_source_requests_total)", () => {
  it("names each way a source endpoint request ends, from a fixed set", () => {
    expect(requestOutcome(undefined)).toBe("accepted");
    expect(requestOutcome(new UnauthorizedError("signature does not match"))).toBe("unauthorized");
    expect(requestOutcome(new NotFoundError("no such endpoint", "endpoint_not_found"))).toBe("not_found");
    expect(requestOutcome(new PayloadTooLargeError())).toBe("too_large");
    expect(requestOutcome(new TooManyRequestsError("slow down", 1))).toBe("rate_limited");
    expect(requestOutcome(new TooManyRequestsError("quota", 60, "quota_exceeded"))).toBe("rate_limited");
    expect(requestOutcome(new SourceRunFailedError("timed_out"))).toBe("run_failed");
    expect(requestOutcome(new SourceRunFailedError("no_response"))).toBe("run_failed");
    expect(requestOutcome(new UnavailableError())).toBe("error");
    expect(requestOutcome(new ValidationError("request was aborted", "request_aborted"))).toBe("error");
    expect(requestOutcome(new Error("Connection is closed"))).toBe("error");
  });
});
