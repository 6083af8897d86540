/**
 * The closed set of errors the API may answer with. Routes and services throw these; exactly one
 * middleware (`api/middleware/errors.ts`) turns them into `{"error", "code"}` responses. Anything
 * else that escapes is a bug and becomes a generic 500 whose details stay in the logs.
 */
export class AppError extends Error {
  /** True for errors whose message is safe to show to the caller. */
  readonly expose: boolean = true;

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** 400: the request is malformed; the message names the parameter. */
export class ValidationError extends AppError {
  constructor(message: string, code = "invalid_parameter") {
    super(400, code, message);
  }
}

/** 401: missing, invalid or revoked credentials. */
export class UnauthorizedError extends AppError {
  constructor(message = "missing or invalid API key") {
    super(401, "unauthorized", message);
  }
}

/** 403: the credentials are valid but the request may not use them (the message says what is missing). */
export class ForbiddenError extends AppError {
  constructor(message: string, code = "forbidden") {
    super(403, code, message);
  }
}

/** 404: unknown id, or an id owned by another user (existence is never revealed). */
export class NotFoundError extends AppError {
  constructor(message = "not found", code = "not_found") {
    super(404, code, message);
  }
}

/** 409: the request conflicts with existing state (for example a taken username). */
export class ConflictError extends AppError {
  constructor(message: string, code = "conflict") {
    super(409, code, message);
  }
}

/** 413: the body is over the configured limit. */
export class PayloadTooLargeError extends AppError {
  constructor(message = "request body is too large") {
    super(413, "payload_too_large", message);
  }
}

/** 415: a JSON endpoint was given a body that is not JSON. */
export class UnsupportedMediaTypeError extends AppError {
  constructor(message = "Content-Type must be application/json") {
    super(415, "unsupported_media_type", message);
  }
}

/** 429: a quota or rate limit was hit; `retryAfterSeconds` becomes the Retry-After header. */
export class TooManyRequestsError extends AppError {
  constructor(message: string, retryAfterSeconds: number, code = "rate_limited") {
    super(429, code, message, { "retry-after": String(Math.max(1, Math.ceil(retryAfterSeconds))) });
  }
}

/** 503: a dependency (Redis) is unavailable; `retryAfterSeconds` becomes the Retry-After header. */
export class UnavailableError extends AppError {
  constructor(message = "service temporarily unavailable", retryAfterSeconds = 5) {
    super(503, "unavailable", message, { "retry-after": String(retryAfterSeconds) });
  }
}

/**
 * 502/504: a source's run did not produce a usable answer to the HTTP request it was given
 * (customResponse). The caller is anonymous, so the body never carries the run's error: the
 * detail is recorded on the source's `$errors` channel, where its owner reads it.
 */
export class SourceRunFailedError extends AppError {
  constructor(reason: "failed" | "timed_out" | "no_response" | "invalid_response") {
    const [status, code, message] = SOURCE_RUN_FAILURES[reason];
    super(status, code, message);
  }
}

const SOURCE_RUN_FAILURES = {
  failed: [502, "source_run_failed", "source run failed"],
  timed_out: [504, "source_run_failed", "source run timed out"],
  no_response: [502, "no_response", "the source finished without calling this.http.respond()"],
  invalid_response: [502, "invalid_response", "source run failed: its response was refused"],
} as const;
