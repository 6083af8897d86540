/**
 * The live tail's wire format (SPEC §9): `text/event-stream` frames. Each event is an `id:` line
 * (the event id, which a reconnecting client sends back as `Last-Event-ID`) and one `data:` line of
 * JSON; no `event:` field, so a browser's `onmessage` fires. JSON.stringify never emits a raw line
 * break, so one data line always holds the whole item.
 */
export function eventFrame(id: string, json: string): string {
  return `id: ${id}\ndata: ${json}\n\n`;
}

/** `eventFrame(id, json).length` without building the frame (what a queued event will take). */
export function eventFrameLength(id: string, json: string): number {
  return id.length + json.length + 13;
}

/** The comment sent every heartbeat interval: keeps proxies from closing an idle stream. */
export const HEARTBEAT_FRAME = ":sse-handshake\n\n";

/** A slow reader this many events behind is disconnected (it can resume with Last-Event-ID). */
export const MAX_EVENTS_BEHIND = 1000;

/** One open stream and the bytes the daemon holds for it. */
export interface HeldStream<T> {
  readonly stream: T;
  readonly bytes: number;
}

/**
 * The streams to disconnect so that the others together hold at most `budget` bytes: the largest
 * first (they are the readers furthest behind, and each cut frees the most), as few as that takes.
 * Streams of equal size go in the order given (the caller lists the oldest first).
 */
export function streamsToShed<T>(held: readonly HeldStream<T>[], budget: number): T[] {
  let total = 0;
  for (const h of held) total += h.bytes;
  const order = held.map((h, i) => ({ h, i })).sort((a, b) => b.h.bytes - a.h.bytes || a.i - b.i);
  const out: T[] = [];
  for (const { h } of order) {
    if (total <= budget || h.bytes === 0) break;
    out.push(h.stream);
    total -= h.bytes;
  }
  return out;
}
