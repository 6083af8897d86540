/**
 * The live tail's wire format (SPEC §9): `text/event-stream` frames. Each event is an `id:` line
 * (the event id, which a reconnecting client sends back as `Last-Event-ID`) and one `data:` line of
 * JSON; no `event:` field, so a browser's `onmessage` fires. JSON.stringify never emits a raw line
 * break, so one data line always holds the whole item.
 */
export function eventFrame(id: string, json: string): string {
  return `id: ${id}\ndata: ${json}\n\n`;
}

/** The comment sent every heartbeat interval: keeps proxies from closing an idle stream. */
export const HEARTBEAT_FRAME = ":sse-handshake\n\n";

/** A slow reader this many events behind is disconnected (it can resume with Last-Event-ID). */
export const MAX_EVENTS_BEHIND = 1000;
