/**
 * What every emitted event's metadata must satisfy, whichever way it comes in: the workflow
 * ingress (events/ingest.ts), a source's `$emit` (runtime/sandbox/host-bridge.ts) and the API's
 * `event_name` parameters (services/subscriptions.ts). One rule, so a channel a source can create
 * is always one the API can list, subscribe to and delete.
 */

/** Longest channel name, in UTF-16 code units (JavaScript string length). */
export const MAX_CHANNEL_NAME_LENGTH = 200;
/** Longest `summary`, in characters. */
export const MAX_SUMMARY_LENGTH = 10_000;
/** Longest string `id`, in characters (used by dedupe, stored in every event's metadata). */
export const MAX_EMIT_ID_LENGTH = 1000;

const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f]/;

/**
 * Why `name` cannot be a channel name ("must be at most 200 characters", ...), or null when it
 * can. Callers prefix the field's own name to make the message.
 */
export function channelNameProblem(name: string): string | null {
  if (name.length > MAX_CHANNEL_NAME_LENGTH) return `must be at most ${MAX_CHANNEL_NAME_LENGTH} characters`;
  if (CONTROL_CHARACTERS.test(name)) return "must not contain control characters";
  return null;
}
