import type { InboundAuth } from "../domain/inbound-auth.js";
import type { PageRequest } from "../domain/pagination.js";
import { randomBase62 } from "../domain/ids.js";
import { slugify, uniqueSlug } from "../domain/slug.js";
import { atLimit, limitReached, UNLIMITED, type UserLimits } from "../domain/limits.js";
import { CAPPED_INSERT } from "./scripts/capped-insert.js";
import { parseStored, type StoreContext } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { loadJson, pageFromSortedSet, type Page } from "./listing.js";
import { listenerChangeMessage } from "./keys.js";
import { LocalChanges } from "./local-changes.js";
import { StreamDrops } from "./stream-drops.js";

export interface SourceRecord {
  id: string;
  user_id: string;
  component_id: string;
  configured_props: Record<string, unknown>;
  active: boolean;
  created_at: number;
  updated_at: number;
  name: string;
  name_slug: string;
  /** Token of the HTTP endpoint (`/e/<token>`), when the component has an HTTP prop. */
  endpoint_token: string | null;
  /** Name of the HTTP prop, when there is one. */
  http_prop: string | null;
  /**
   * Inbound verification of the HTTP endpoint, with its secret (SPEC §12); absent on records
   * written before it existed. configured_props shows it without the secret.
   */
  http_auth?: InboundAuth | null;
}

/** Where an HTTP endpoint token leads. */
export interface EndpointTarget {
  userId: string;
  sourceId: string;
}

export class SourceStore {
  private readonly cappedInsert: ScriptCall;
  /** Its event streams go with a source, giving back what they held (store/stream-drops.ts). */
  private readonly streams: StreamDrops;
  /**
   * "<user id> <source id>" of every source saved or deleted by this process, once committed; other
   * processes learn it from `keys.listenerChanges()`, published in the change's transaction
   * (source caches drop the source: store/source-cache.ts).
   */
  readonly changes = new LocalChanges();

  constructor(
    private readonly ctx: StoreContext,
    /** Uses sources. */
    private readonly limits: UserLimits = UNLIMITED,
  ) {
    this.cappedInsert = defineScript(ctx.redis, CAPPED_INSERT);
    this.streams = new StreamDrops(ctx.redis, ctx.keys);
  }

  /**
   * Refuses early, before lifecycle hooks run in the sandbox, when the user already has as many
   * sources as allowed. Not atomic: `create` checks again in the same step as the write.
   */
  async checkRoom(userId: string): Promise<void> {
    const max = this.limits.sources;
    if (max === 0) return;
    const count = await this.ctx.redis.zcard(this.ctx.keys.sources(userId));
    if (atLimit(count, max)) throw limitReached("sources", count, max);
  }

  newEndpointToken(): string {
    return randomBase62(32, this.ctx.randomBytes);
  }

  async get(userId: string, id: string): Promise<SourceRecord | undefined> {
    return parseStored<SourceRecord>(await this.ctx.redis.get(this.ctx.keys.source(userId, id)));
  }

  /** The source's db state (what `this.db` holds between runs); undefined before its first save. */
  async db(userId: string, id: string): Promise<Record<string, unknown> | undefined> {
    return parseStored<Record<string, unknown>>(await this.ctx.redis.get(this.ctx.keys.sourceDb(userId, id)));
  }

  async saveDb(userId: string, id: string, db: Record<string, unknown>): Promise<void> {
    await this.ctx.redis.set(this.ctx.keys.sourceDb(userId, id), JSON.stringify(db));
  }

  async list(userId: string, page: PageRequest): Promise<Page<SourceRecord>> {
    const { redis, keys } = this.ctx;
    return pageFromSortedSet(redis, keys.sources(userId), page, (ids) =>
      loadJson<SourceRecord>(
        redis,
        ids.map((id) => keys.source(userId, id)),
      ),
    );
  }

  /** All source ids of a user (for deletion of the user, timers reconciliation). */
  async ids(userId: string): Promise<string[]> {
    return this.ctx.redis.zrange(this.ctx.keys.sources(userId), 0, -1);
  }

  /**
   * Claims a unique slug for `name` (`-2`, `-3`… on collision). `keep` is the slug the source
   * already holds, which stays its own.
   */
  async claimSlug(userId: string, sourceId: string, name: string, keep?: string): Promise<string> {
    const { redis, keys } = this.ctx;
    const base = slugify(name);
    if (keep === base) return keep;
    for (let attempt = 0; attempt < 20; attempt++) {
      // The slug the source holds counts as free: renaming "x" to "X!" keeps "x".
      const taken = new Set(await redis.hkeys(keys.sourceSlugs(userId)));
      if (keep) taken.delete(keep);
      const slug = uniqueSlug(base, (s) => taken.has(s));
      if (slug === keep) return keep;
      if ((await redis.hsetnx(keys.sourceSlugs(userId), slug, sourceId)) === 1) return slug;
    }
    throw new Error("could not claim a unique slug");
  }

  async releaseSlug(userId: string, slug: string, sourceId: string): Promise<void> {
    const owner = await this.ctx.redis.hget(this.ctx.keys.sourceSlugs(userId), slug);
    if (owner === sourceId) await this.ctx.redis.hdel(this.ctx.keys.sourceSlugs(userId), slug);
  }

  /**
   * Writes a new source and its list entry, unless the user already has `limits.sources` sources: then nothing is written and 429 `limit_exceeded` is thrown. The check and the write
   * are one atomic step (store/capped-insert-lua.ts). The endpoint token goes in first: a crash
   * between the two steps leaves a token that leads to no source (a 404), never a source whose
   * endpoint does not answer.
   */
  async create(record: SourceRecord, scoreMs: number): Promise<void> {
    const { redis, keys } = this.ctx;
    const max = this.limits.sources;
    if (record.endpoint_token) await redis.hset(keys.endpoints(), record.endpoint_token, `${record.user_id} ${record.id}`);
    const [status, count] = (await this.cappedInsert(
      [keys.source(record.user_id, record.id), keys.sources(record.user_id)],
      [record.id, scoreMs, JSON.stringify(record), max],
    )) as [number, number];
    if (status === 1) return;
    if (record.endpoint_token) await redis.hdel(keys.endpoints(), record.endpoint_token);
    if (status === -1) throw limitReached("sources", count, max);
    throw new Error(`source ${record.id} already exists`);
  }

  /**
   * Writes the source and its list entry (one MULTI in the user's shard, with the change message),
   * then its endpoint token (global hash). In that order because the record holds the token: a
   * crash in between leaves an endpoint that answers 404 until the same save is made again (the
   * token is kept from the record, so the retry writes the same entry), never a token that leads
   * to a source which does not hold it.
   */
  async save(record: SourceRecord, scoreMs: number): Promise<void> {
    const { redis, keys } = this.ctx;
    const message = listenerChangeMessage(record.user_id, record.id);
    await redis
      .multi()
      .set(keys.source(record.user_id, record.id), JSON.stringify(record))
      .zadd(keys.sources(record.user_id), "NX", scoreMs, record.id)
      .publish(keys.listenerChanges(), message)
      .exec();
    this.changes.emit(message);
    if (record.endpoint_token) await redis.hset(keys.endpoints(), record.endpoint_token, `${record.user_id} ${record.id}`);
  }

  /**
   * Where a token leads, as indexed. The caller checks that the source exists and still holds the
   * token (an ordered step may have stopped half way: 404). Such an entry is not dropped on read:
   * `create` indexes the token before the source exists, so a request in that window would remove
   * a live one.
   */
  async endpoint(token: string): Promise<EndpointTarget | undefined> {
    if (!/^[A-Za-z0-9]{8,64}$/.test(token)) return undefined;
    const raw = await this.ctx.redis.hget(this.ctx.keys.endpoints(), token);
    if (!raw) return undefined;
    const [userId, sourceId] = raw.split(" ");
    return userId && sourceId ? { userId, sourceId } : undefined;
  }

  async deleteEndpoint(token: string): Promise<void> {
    await this.ctx.redis.hdel(this.ctx.keys.endpoints(), token);
  }

  /**
   * Removes the source and everything that hangs off it in the store (events, db, dedupe state).
   * The endpoint token goes first (global hash), then its event streams, then the source's keys (one
   * MULTI in the user's shard): a crash in between leaves a source whose endpoint answers 404, which deleting again
   * finishes, never a token left pointing at nothing forever.
   */
  async delete(record: SourceRecord): Promise<void> {
    const { redis, keys } = this.ctx;
    const u = record.user_id;
    if (record.endpoint_token) await redis.hdel(keys.endpoints(), record.endpoint_token);
    // Its event streams next, giving back what they held (a crash after this leaves a source
    // without events, which deleting again finishes).
    await this.streams.dropEmitter(u, record.id);
    const tx = redis
      .multi()
      .del(keys.source(u, record.id))
      .zrem(keys.sources(u), record.id)
      .del(keys.sourceDb(u, record.id))
      .del(keys.sourceDedupe(u, record.id));
    const message = listenerChangeMessage(u, record.id);
    await tx.publish(keys.listenerChanges(), message).exec();
    this.changes.emit(message);
    await this.releaseSlug(u, record.name_slug, record.id);
  }
}
