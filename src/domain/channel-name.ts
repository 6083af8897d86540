/**
 * Channel (event) names: what the ingress, subscriptions, summaries and source emits accept, and
 * how a name travels in the `x-tributary-event-name` delivery header.
 *
 * A name is any string of at most 200 characters without control characters or unpaired UTF-16
 * surrogates (those cannot be stored as UTF-8, so the name read back would differ). `""` and
 * `default` are the default channel. A name of spaces only (`"   "`) is a channel of its own,
 * like any other name: Pipedream does not trim names, so neither do we.
 *
 * Header values cannot carry every such name: HTTP allows only visible ASCII (and obsolete
 * Latin-1) in a value, and strips leading and trailing spaces, so `emoji😀` could not be sent at
 * all and `"   "` would arrive empty. The header therefore carries the name percent-encoded:
 * every character outside visible ASCII (`!`..`~`), and `%` itself, is replaced by the `%XX`
 * escapes of its UTF-8 bytes, as RFC 3986 and RFC 8187 encode. Names made of visible ASCII other
 * than `%` (`default`, `$errors`, `order.created`) are sent unchanged. Receivers decode with any
 * percent-decoder: `decodeURIComponent` (JavaScript), `urllib.parse.unquote` (Python),
 * `url.PathUnescape` (Go).
 */

export const MAX_CHANNEL_NAME_LENGTH = 200;

const CONTROL = /[\u0000-\u001f\u007f]/;
/** An unpaired surrogate (with the u flag, a well-formed pair is one code point, not Cs). */
const LONE_SURROGATE = /\p{Cs}/u;

/** Why `name` cannot be a channel name ("must ..."), or undefined when it can. */
export function channelNameProblem(name: string): string | undefined {
  if (name.length > MAX_CHANNEL_NAME_LENGTH) return `must be at most ${MAX_CHANNEL_NAME_LENGTH} characters`;
  if (CONTROL.test(name)) return "must not contain control characters";
  if (LONE_SURROGATE.test(name)) return "must not contain unpaired UTF-16 surrogates";
  return undefined;
}

/** Characters the header carries as they are: visible ASCII except `%`. */
const PLAIN = /^[\u0021-\u0024\u0026-\u007e]*$/;

/** The `x-tributary-event-name` value for a channel (`""` is sent as `default`). */
export function eventNameHeader(channel: string): string {
  const name = channel === "" ? "default" : channel;
  if (PLAIN.test(name)) return name;
  let out = "";
  for (const ch of name) {
    const c = ch.codePointAt(0) ?? 0;
    if (c >= 0x21 && c <= 0x7e && c !== 0x25) out += ch;
    // An unpaired surrogate (only from a source's own emits) goes out as U+FFFD, as UTF-8 stores it.
    else if (c >= 0xd800 && c <= 0xdfff) out += "%EF%BF%BD";
    else out += encodeURIComponent(ch);
  }
  return out;
}

/** The channel name a receiver reads back from `x-tributary-event-name`. */
export function decodeEventNameHeader(value: string): string {
  return decodeURIComponent(value);
}
