import { createHash } from "node:crypto";
import { TooManyRequestsError, UnavailableError } from "../domain/errors.js";
import { compareEventIds } from "../domain/ids.js";
import { eventFrame, eventFrameLength, HEARTBEAT_FRAME, MAX_EVENTS_BEHIND, streamsToShed } from "../domain/server-sent-events.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import type { EmitterKind } from "../store/events.js";
import type { LiveTailStore, TailEntry, TailReader, TailStream } from "../store/live-tail.js";

/** Where a stream's frames go: the HTTP response (api/routes/live-tail.ts). */
export interface TailSink {
  /** Writes a frame; false when the client is not keeping up (wait for `onDrain`). */
  write(frame: string): boolean;
  /** Calls `fn` once the client has taken what was written. */
  onDrain(fn: () => void): void;
  /** Bytes written and not yet taken by the client (what the socket still holds in this process). */
  buffered(): number;
  /** Ends the response once what was written is sent. */
  end(): void;
  /** Cuts the connection now, dropping what the client has not taken. */
  destroy(): void;
}

export interface TailRequest {
  readonly userId: string;
  readonly kind: EmitterKind;
  readonly emitterId: string;
  /** The channel as stored ("" = default). */
  readonly channel: string;
  /** Resume after this event id (Last-Event-ID): replay what is still kept, then go live. */
  readonly lastEventId?: string;
  /** The digest of the API key behind the stream (directly or through a browser token): its rotation ends the stream. */
  readonly keyDigest: string;
}

export interface LiveTailOptions {
  readonly heartbeatMs: number;
  readonly tokenTtlMs: number;
  /** A new browser token (random, unguessable). */
  readonly newToken: () => string;
  /** Open streams per user across every process; 0 = unlimited. */
  readonly maxStreamsPerUser: number;
  /** Bytes one stream may hold (unsent plus queued) before it is disconnected. */
  readonly maxBufferedBytesPerStream: number;
  /** Bytes all streams of the process may hold together; past it the largest are disconnected. */
  readonly maxBufferedBytesPerProcess: number;
  /** The user an API key digest belongs to now (undefined once the key was rotated or its user deleted). */
  readonly keyHolder: (keyDigest: string) => Promise<string | undefined>;
  readonly now: () => number;
  readonly newStreamId: () => string;
  readonly logger: Logger;
  readonly metrics: Metrics;
}

/** What a browser token grants, or why it no longer does. */
export type TokenGrant =
  | { readonly status: "valid"; readonly userId: string; readonly sourceId: string; readonly keyDigest: string }
  | { readonly status: "key_rotated" }
  | { readonly status: "unknown" };

const tokenHash = (token: string) => createHash("sha256").update(token).digest("hex");

/** How long a blocking read waits before looking again (deleted emitters, changed stream sets). */
const READ_BLOCK_MS = 1000;
/** Entries taken per stream per read. */
const READ_COUNT = 500;
/**
 * A resume replays in pages of this many entries, the next read only once the client took the
 * last: a replay holds a few events in memory, however many the stream keeps or however large.
 */
const REPLAY_PAGE = 4;
/** Pause after a failed read (Redis down) before the next. */
const READ_RETRY_MS = 500;

type EndReason =
  | "slow_reader"
  | "stream_bytes"
  | "process_bytes"
  | "key_revoked"
  | "emitter_deleted"
  | "read_failed"
  | "shutdown"
  | "client";

/** Ends for being behind: the connection is cut at once, so that what it held is freed now. */
const CUT: ReadonlySet<EndReason> = new Set(["slow_reader", "stream_bytes", "process_bytes", "read_failed"]);

interface SubscriberHooks {
  /** The stream's held bytes may have changed (LiveTail keeps the budgets). */
  held(s: Subscriber): void;
  ended(s: Subscriber, reason: EndReason): void;
  sent(): void;
  /** A page of the resume replay: up to `count` entries after `afterId`. */
  replay(afterId: string, count: number): Promise<TailEntry[]>;
}

const frameBytes = (e: TailEntry) => eventFrameLength(e.id, e.json);

/**
 * One open stream: a cursor, the frames the client has not taken yet, and its sink. What it holds
 * is its sink's unsent bytes plus its queued entries (`held`); LiveTail disconnects it past its
 * budget.
 */
class Subscriber {
  /** The newest event id sent or queued. */
  private last: string;
  /** While resuming: the replay has sent everything up to this id (pages are read after it). */
  private replayCursor: string | undefined;
  private replayReading = false;
  /** Live entries that came while the resume replay ran (sent after it, without duplicates). */
  private early: TailEntry[] | undefined;
  /** Entries waiting for the client to drain (bounded in count and bytes: past them the stream ends). */
  private pending: TailEntry[] = [];
  /** Frame bytes of `pending` and `early`. */
  private queuedBytes = 0;
  private backedUp = false;
  /** The held bytes last counted into the process total (LiveTail's bookkeeping). */
  counted = 0;
  ended = false;

  constructor(
    readonly id: string,
    readonly request: TailRequest,
    private readonly sink: TailSink,
    start: string,
    private readonly hooks: SubscriberHooks,
  ) {
    this.last = start;
  }

  /** Bytes held for this stream now: unsent in the socket plus queued. */
  held(): number {
    return this.ended ? 0 : this.sink.buffered() + this.queuedBytes;
  }

  /** Entries the stream's reader saw (newer than anything before, in order). */
  deliver(entries: readonly TailEntry[]): void {
    if (this.early) {
      for (const e of entries) this.queuedBytes += frameBytes(e);
      this.early.push(...entries);
      if (this.early.length > MAX_EVENTS_BEHIND) this.end("slow_reader");
      else this.hooks.held(this);
      return;
    }
    for (const e of entries) this.enqueue(e);
    this.hooks.held(this);
  }

  /** Resumes after `afterId`: replays what the stream keeps, page by page, then goes live. */
  async resume(afterId: string): Promise<void> {
    this.early = [];
    this.replayCursor = afterId;
    await this.replayPage();
  }

  heartbeat(): void {
    if (!this.backedUp && !this.ended) this.write(HEARTBEAT_FRAME);
  }

  end(reason: EndReason): void {
    if (this.ended) return;
    this.ended = true;
    this.pending = [];
    this.early = undefined;
    this.queuedBytes = 0;
    if (CUT.has(reason) || (this.backedUp && reason !== "client")) this.sink.destroy();
    else if (reason !== "client") this.sink.end();
    this.hooks.ended(this, reason);
  }

  /** Reads and sends the next replay page once the previous one was taken; goes live after the last. */
  private async replayPage(): Promise<void> {
    const cursor = this.replayCursor;
    if (cursor === undefined || this.replayReading || this.ended || this.backedUp || this.pending.length > 0) return;
    this.replayReading = true;
    let page: TailEntry[];
    try {
      page = await this.hooks.replay(cursor, REPLAY_PAGE);
    } finally {
      this.replayReading = false;
    }
    if (this.ended) return;
    for (const e of page) this.enqueue(e);
    const newest = page[page.length - 1];
    if (page.length < REPLAY_PAGE || newest === undefined) {
      const early = this.early ?? [];
      this.early = undefined;
      this.replayCursor = undefined;
      for (const e of early) this.queuedBytes -= frameBytes(e);
      for (const e of early) this.enqueue(e);
    } else {
      this.replayCursor = newest.id;
    }
    this.hooks.held(this);
    this.continueReplay();
  }

  /** The next page, if the replay is still running (a failed read cuts the stream: the client resumes). */
  private continueReplay(): void {
    if (this.replayCursor === undefined) return;
    this.replayPage().catch(() => this.end("read_failed"));
  }

  private enqueue(e: TailEntry): void {
    if (this.ended || compareEventIds(e.id, this.last) <= 0) return;
    this.last = e.id;
    if (this.backedUp) {
      this.pending.push(e);
      this.queuedBytes += frameBytes(e);
      if (this.pending.length > MAX_EVENTS_BEHIND) this.end("slow_reader");
      return;
    }
    this.send(e);
  }

  private send(e: TailEntry): void {
    this.hooks.sent();
    this.write(eventFrame(e.id, e.json));
  }

  private write(frame: string): void {
    if (this.sink.write(frame)) return;
    this.backedUp = true;
    this.sink.onDrain(() => {
      this.backedUp = false;
      while (!this.backedUp && !this.ended && this.pending.length > 0) {
        const e = this.pending.shift() as TailEntry;
        this.queuedBytes -= frameBytes(e);
        this.send(e);
      }
      if (this.ended) return;
      this.hooks.held(this);
      this.continueReplay();
    });
  }
}

/** One (emitter, channel) stream watched on this process, and the streams open on it. */
interface Tap {
  readonly stream: TailStream;
  readonly kind: EmitterKind;
  /** The newest id read (entries after it are delivered); undefined until known. */
  lastId: string | undefined;
  readonly ready: Promise<void>;
  readonly subscribers: Set<Subscriber>;
}

/** The streams of one user on this process: one blocking reader over all of them. */
class UserTail {
  readonly taps = new Map<string, Tap>();
  private reader: TailReader | undefined;
  private running: Promise<void> | undefined;
  private lastEmitterCheck = 0;

  constructor(
    readonly userId: string,
    private readonly store: LiveTailStore,
    private readonly opts: LiveTailOptions,
    private readonly onIdle: (u: UserTail) => void,
  ) {}

  /** The tap of a stream, created (its position read from Redis) on first use. */
  tap(kind: EmitterKind, stream: TailStream): Tap {
    const key = `${stream.emitterId}\n${stream.channel}`;
    let tap = this.taps.get(key);
    if (!tap) {
      const created: Tap = {
        stream,
        kind,
        lastId: undefined,
        subscribers: new Set(),
        ready: this.store.lastId(stream).then((id) => {
          created.lastId = id;
        }),
      };
      created.ready.catch(() => {});
      tap = created;
      this.taps.set(key, tap);
    }
    return tap;
  }

  /** Starts the read loop, or wakes it so it reads the new set of streams. */
  wake(): void {
    if (!this.running) {
      if (this.taps.size === 0) return;
      this.reader = this.store.reader(`live-tail:${this.userId}`);
      this.running = this.loop().finally(() => {
        this.running = undefined;
      });
    } else if (this.reader) {
      this.store.unblock(this.reader).catch(() => {});
    }
  }

  /** Removes a stream from its tap, and the tap once nobody watches it. */
  drop(request: TailRequest, s?: Subscriber): void {
    const key = `${request.emitterId}\n${request.channel}`;
    const tap = this.taps.get(key);
    if (s) tap?.subscribers.delete(s);
    if (tap && tap.subscribers.size === 0) this.taps.delete(key);
  }

  private async loop(): Promise<void> {
    const reader = this.reader as TailReader;
    let lastError = 0;
    try {
      while (this.taps.size > 0) {
        const taps = [...this.taps.values()].filter((t) => t.lastId !== undefined);
        try {
          if (taps.length === 0) {
            await Promise.race([...this.taps.values()].map((t) => t.ready.catch(() => {})));
            continue;
          }
          const got = await reader.read(
            taps.map((t) => t.stream),
            taps.map((t) => t.lastId as string),
            READ_BLOCK_MS,
            READ_COUNT,
          );
          for (const [i, entries] of got) {
            const tap = taps[i];
            const newest = entries[entries.length - 1];
            if (!tap || !newest) continue;
            tap.lastId = newest.id;
            for (const s of tap.subscribers) s.deliver(entries);
          }
          await this.endDeletedEmitters();
        } catch (err) {
          if (this.taps.size === 0) break;
          const now = this.opts.now();
          if (now - lastError > 5000) {
            lastError = now;
            this.opts.logger.warn({ err: (err as Error).message }, "live tail: reading events failed; retrying");
          }
          await new Promise((r) => setTimeout(r, READ_RETRY_MS));
        }
      }
    } finally {
      reader.close();
      this.reader = undefined;
      this.onIdle(this);
    }
  }

  /** At most once a second: streams of an emitter that was deleted end (any process may delete it). */
  private async endDeletedEmitters(): Promise<void> {
    const now = this.opts.now();
    if (now - this.lastEmitterCheck < READ_BLOCK_MS) return;
    this.lastEmitterCheck = now;
    const emitters = new Map<string, EmitterKind>();
    for (const t of this.taps.values()) emitters.set(t.stream.emitterId, t.kind);
    for (const [emitterId, kind] of emitters) {
      if (await this.store.emitterExists(this.userId, kind, emitterId)) continue;
      for (const t of [...this.taps.values()]) {
        if (t.stream.emitterId === emitterId) for (const s of [...t.subscribers]) s.end("emitter_deleted");
      }
    }
  }
}

/**
 * The live tail (SPEC §9): streams of new events to SSE clients. Each process reads the event
 * streams its clients watch straight from Redis (one blocking XREAD per user over that user's
 * streams), so an event recorded by any process reaches every process's clients; a resume replays
 * what the stream still keeps after `Last-Event-ID`, then goes live without a gap or a duplicate
 * (entries are compared by id).
 *
 * What the streams hold in memory is bounded in bytes: each stream's unsent socket bytes plus its
 * queued entries are counted after every change (an over-estimate between changes: a socket only
 * drains meanwhile). A stream past SSE_MAX_BUFFERED_BYTES_PER_STREAM (or MAX_EVENTS_BEHIND
 * queued events) is cut; when all of them together pass SSE_MAX_BUFFERED_BYTES_PER_PROCESS, the
 * largest are cut. A cut destroys the connection, freeing its bytes at once; the client resumes
 * with the id of the last whole event it read.
 */
export class LiveTail {
  private readonly users = new Map<string, UserTail>();
  /** Open streams, oldest first (a Set keeps insertion order). */
  private readonly subscribers = new Set<Subscriber>();
  private readonly heartbeat: NodeJS.Timeout;
  /** Σ `counted` of the open streams. */
  private heldBytes = 0;
  private shedding = false;
  private closed = false;

  constructor(
    private readonly store: LiveTailStore,
    private readonly opts: LiveTailOptions,
  ) {
    this.heartbeat = setInterval(() => this.beat(), opts.heartbeatMs);
    this.heartbeat.unref();
  }

  /** A slot a process stops vouching for is freed after this long (its process died). */
  private get staleMs(): number {
    return Math.max(3 * this.opts.heartbeatMs, 30_000);
  }

  /**
   * Opens a stream into `sink`; 429 when the user has SSE_MAX_STREAMS_PER_USER open. The caller
   * has checked that the emitter exists and is the user's. Returns the close function (the client
   * went away).
   */
  async open(request: TailRequest, sink: TailSink): Promise<() => void> {
    if (this.closed) throw new UnavailableError("the server is shutting down");
    const id = this.opts.newStreamId();
    const max = this.opts.maxStreamsPerUser;
    if (!(await this.store.openStream(request.userId, id, this.opts.now(), this.staleMs, max))) {
      throw new TooManyRequestsError(`at most ${max} live-tail streams may be open per user`, 5, "limit_exceeded");
    }
    let user = this.users.get(request.userId);
    if (!user) {
      user = new UserTail(request.userId, this.store, this.opts, (u) => {
        if (this.users.get(u.userId) === u && u.taps.size === 0) this.users.delete(u.userId);
        // A stream opened while the loop was ending restarts it.
        else if (u.taps.size > 0) u.wake();
      });
      this.users.set(request.userId, user);
    }
    const stream: TailStream = { userId: request.userId, emitterId: request.emitterId, channel: request.channel };
    const tap = user.tap(request.kind, stream);
    try {
      await tap.ready;
    } catch (err) {
      user.drop(request);
      await this.store.closeStream(request.userId, id).catch(() => {});
      throw err;
    }
    const resume = request.lastEventId;
    const owner = user;
    const sub = new Subscriber(id, request, sink, resume ?? (tap.lastId as string), {
      held: (s) => this.account(s),
      ended: (s, reason) => this.ended(owner, s, reason),
      sent: () => this.opts.metrics.liveTailEvents.inc(),
      replay: (afterId, count) => this.store.after(stream, afterId, count),
    });
    tap.subscribers.add(sub);
    this.subscribers.add(sub);
    this.opts.metrics.liveTailStreams.inc();
    user.wake();
    if (resume !== undefined) {
      try {
        await sub.resume(resume);
      } catch (err) {
        sub.end("client");
        throw err;
      }
    }
    return () => sub.end("client");
  }

  /**
   * A read-only browser token for one source's streams (browsers cannot send an Authorization
   * header), bound to the API key that asked for it (`keyDigest`): it stops working when that key
   * is rotated. Only its hash is stored; it expires after SSE_TOKEN_TTL_SECONDS.
   */
  async issueToken(userId: string, sourceId: string, keyDigest: string): Promise<{ token: string; expiresAtMs: number }> {
    const token = this.opts.newToken();
    await this.store.saveToken(tokenHash(token), { userId, sourceId, keyDigest }, this.opts.tokenTtlMs);
    return { token, expiresAtMs: this.opts.now() + this.opts.tokenTtlMs };
  }

  /** What a browser token grants: valid while unexpired and while the key it was issued with is the user's. */
  async tokenGrant(token: string): Promise<TokenGrant> {
    const owner = await this.store.tokenOwner(tokenHash(token));
    if (!owner) return { status: "unknown" };
    if ((await this.opts.keyHolder(owner.keyDigest)) !== owner.userId) return { status: "key_rotated" };
    return { status: "valid", ...owner };
  }

  /** An API key stopped working (rotation, user deletion): the streams opened with it, or with its tokens, end. */
  revoked(keyDigest: string): void {
    for (const s of [...this.subscribers]) if (s.request.keyDigest === keyDigest) s.end("key_revoked");
  }

  /** Ends every stream (shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.heartbeat);
    for (const s of [...this.subscribers]) s.end("shutdown");
  }

  /** Counts a stream's held bytes into the total; cuts it past its budget, or the largest past the process's. */
  private account(s: Subscriber): void {
    if (s.ended) return;
    const held = s.held();
    this.heldBytes += held - s.counted;
    s.counted = held;
    if (held > this.opts.maxBufferedBytesPerStream) s.end("stream_bytes");
    else if (this.heldBytes > this.opts.maxBufferedBytesPerProcess) this.shed();
    this.opts.metrics.liveTailBufferedBytes.set(this.heldBytes);
  }

  /** Over the process budget: counts every stream afresh (sockets drained meanwhile), then cuts the largest. */
  private shed(): void {
    if (this.shedding) return;
    this.shedding = true;
    try {
      const held = [...this.subscribers].map((stream) => {
        const bytes = stream.held();
        this.heldBytes += bytes - stream.counted;
        stream.counted = bytes;
        return { stream, bytes };
      });
      for (const s of streamsToShed(held, this.opts.maxBufferedBytesPerProcess)) s.end("process_bytes");
    } finally {
      this.shedding = false;
    }
  }

  private ended(user: UserTail, s: Subscriber, reason: EndReason): void {
    if (!this.subscribers.delete(s)) return;
    this.heldBytes -= s.counted;
    s.counted = 0;
    this.opts.metrics.liveTailBufferedBytes.set(this.heldBytes);
    this.opts.metrics.liveTailStreams.dec();
    if (reason !== "client") this.opts.metrics.liveTailEnded.inc({ reason });
    user.drop(s.request, s);
    if (user.taps.size === 0) user.wake();
    this.store.closeStream(s.request.userId, s.id).catch(() => {});
  }

  private beat(): void {
    const byUser = new Map<string, string[]>();
    for (const s of this.subscribers) {
      s.heartbeat();
      const ids = byUser.get(s.request.userId) ?? [];
      ids.push(s.id);
      byUser.set(s.request.userId, ids);
    }
    for (const [userId, ids] of byUser) {
      this.store.refreshStreams(userId, ids, this.opts.now(), this.staleMs).catch(() => {});
    }
  }
}
