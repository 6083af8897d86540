/**
 * What every emitted event's metadata must satisfy, whichever way it comes in: the workflow
 * ingress (events/ingest.ts), a source's `$emit` (runtime/sandbox/host-bridge.ts) and the API's
 * `event_name` parameters (services/subscriptions.ts). One rule, so a channel a source can create
 * is always one the API can list, subscribe to and delete.
 */

/** Channel names follow one rule wherever they come in (domain/channel-name.ts). */
export { channelNameProblem, MAX_CHANNEL_NAME_LENGTH } from "./channel-name.js";

/** Longest `summary`, in characters. */
export const MAX_SUMMARY_LENGTH = 10_000;
/** Longest string `id`, in characters (used by dedupe, stored in every event's metadata). */
export const MAX_EMIT_ID_LENGTH = 1000;
