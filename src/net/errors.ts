/**
 * Errors of the outbound HTTP layer. They carry stable `code`s so callers (the delivery sender,
 * the component loader, the sandbox's fetch) can tell them apart after undici and node:net have
 * passed them along, possibly wrapped in `cause` or an AggregateError.
 */

/** What every refusal says, whatever the destination. */
export const DESTINATION_REFUSED_MESSAGE =
  "destination refused: private, loopback, link-local and metadata addresses are not allowed (ALLOW_PRIVATE_DESTINATIONS)";

/**
 * The SSRF guard refused to connect: the destination is (or resolves to) a private address.
 * The message never names the address: it reaches users (a delivery's attempt log, a
 * component_url error, a source's fetch), and naming what an internal host name resolves to would
 * map the operator's network for them. `hostname` and `address` stay on the error for the
 * daemon's own logs.
 */
export class DestinationRefusedError extends Error {
  readonly code = "ERR_DESTINATION_REFUSED";

  constructor(
    readonly hostname: string,
    readonly address: string,
  ) {
    super(DESTINATION_REFUSED_MESSAGE);
    this.name = "DestinationRefusedError";
  }
}

/** The response body exceeded the caller's limit; the transfer was cut off. */
export class ResponseTooLargeError extends Error {
  readonly code = "ERR_RESPONSE_TOO_LARGE";

  constructor(readonly maxBytes: number) {
    super(`response body exceeds ${maxBytes} bytes`);
    this.name = "ResponseTooLargeError";
  }
}

/** More redirects than allowed, or a redirect to something that is not an http(s) URL. */
export class RedirectError extends Error {
  readonly code = "ERR_BAD_REDIRECT";

  constructor(message: string) {
    super(message);
    this.name = "RedirectError";
  }
}

/** The whole request (every hop, headers and body) did not finish in time. */
export class FetchTimeoutError extends Error {
  readonly code = "ERR_FETCH_TIMEOUT";

  constructor(readonly timeoutMs: number) {
    super(`request did not complete within ${timeoutMs} ms`);
    this.name = "FetchTimeoutError";
  }
}

/** True when `err`, or anything it wraps, is a DestinationRefusedError. */
export function isDestinationRefused(err: unknown): boolean {
  return someInChain(err, (e) => e instanceof DestinationRefusedError);
}

/** Walks `cause` links and AggregateError members (Happy Eyeballs reports one error per address). */
export function someInChain(err: unknown, test: (e: unknown) => boolean, depth = 0): boolean {
  if (err === null || err === undefined || depth > 8) return false;
  if (test(err)) return true;
  if (err instanceof AggregateError && err.errors.some((e) => someInChain(e, test, depth + 1))) return true;
  return err instanceof Error && someInChain(err.cause, test, depth + 1);
}
