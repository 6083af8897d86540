import { hash } from "node:crypto";
import { newId, randomBase62 } from "../domain/ids.js";
import { ConflictError, NotFoundError } from "../domain/errors.js";
import { epochSeconds, type StoreContext } from "./context.js";
import { LocalChanges } from "./local-changes.js";
import { listenerChangeMessage } from "./keys.js";

export type Plan = "free" | "paid";

export interface UserRecord {
  id: string;
  username: string;
  email: string;
  plan: Plan;
  created_at: number;
  /** sha256 hex of the current API key; the key itself is never stored. */
  api_key_hash: string;
  /** Last four characters of the key, for the masked display in GET /users/me. */
  api_key_last4: string;
}

/** One-shot `crypto.hash` (Node 20.12+): about twice as fast as `createHash` for one short string. */
const hashKey = (key: string): string => hash("sha256", key, "hex");

/** Users and their API keys. Keys are stored hashed; lookups go through the hash. */
export class UserStore {
  /**
   * The digest of every key that stopped working, in this process; other processes learn it from
   * the `apiKeyRevocations` channel.
   */
  readonly revocations = new LocalChanges();

  constructor(private readonly ctx: StoreContext) {}

  private newApiKey(): string {
    return `trib_${randomBase62(40, this.ctx.randomBytes)}`;
  }

  async create(input: { username: string; email: string; plan: Plan }): Promise<{ user: UserRecord; apiKey: string }> {
    const { redis, keys } = this.ctx;
    const id = newId("u_", this.ctx.randomBytes);
    const apiKey = this.newApiKey();
    const now = this.ctx.now();
    const user: UserRecord = {
      id,
      username: input.username,
      email: input.email,
      plan: input.plan,
      created_at: epochSeconds(now),
      api_key_hash: hashKey(apiKey),
      api_key_last4: apiKey.slice(-4),
    };
    // Claim the username first so two concurrent creates cannot both win it.
    const claimed = await redis.hsetnx(keys.usernames(), input.username, id);
    if (claimed === 0) throw new ConflictError(`username ${input.username} is taken`, "username_taken");
    await redis
      .multi()
      .set(keys.user(id), JSON.stringify(user))
      .hset(keys.apiKeys(), user.api_key_hash, id)
      .zadd(keys.users(), now, id)
      .exec();
    return { user, apiKey };
  }

  async get(id: string): Promise<UserRecord | undefined> {
    const raw = await this.ctx.redis.get(this.ctx.keys.user(id));
    return raw ? (JSON.parse(raw) as UserRecord) : undefined;
  }

  async require(id: string): Promise<UserRecord> {
    const user = await this.get(id);
    if (!user) throw new NotFoundError("user not found");
    return user;
  }

  /** The user id an API key belongs to, or undefined. */
  async authenticate(apiKey: string): Promise<string | undefined> {
    const digest = this.digestOf(apiKey);
    return digest === undefined ? undefined : this.userOfDigest(digest);
  }

  /** The digest keys are indexed by; undefined for a string that cannot be a key. */
  digestOf(apiKey: string): string | undefined {
    return apiKey.length < 8 || apiKey.length > 200 ? undefined : hashKey(apiKey);
  }

  /**
   * One lookup by digest: the index is only written together with the user record (MULTI in
   * create and rotateKey), so an entry names a live key. Comparing digests rather than keys means
   * timing reveals nothing about the key itself.
   */
  async userOfDigest(digest: string): Promise<string | undefined> {
    return (await this.ctx.redis.hget(this.ctx.keys.apiKeys(), digest)) ?? undefined;
  }

  /** Issues a new key; the old one stops working in the same atomic step. */
  async rotateKey(id: string): Promise<string> {
    const { redis, keys } = this.ctx;
    const user = await this.require(id);
    const apiKey = this.newApiKey();
    const updated: UserRecord = { ...user, api_key_hash: hashKey(apiKey), api_key_last4: apiKey.slice(-4) };
    await redis
      .multi()
      .hdel(keys.apiKeys(), user.api_key_hash)
      .hset(keys.apiKeys(), updated.api_key_hash, id)
      .set(keys.user(id), JSON.stringify(updated))
      // Auth caches (auth-cache.ts) drop the old key when this arrives.
      .publish(keys.apiKeyRevocations(), user.api_key_hash)
      .exec();
    this.revocations.emit(user.api_key_hash);
    return apiKey;
  }

  async list(): Promise<UserRecord[]> {
    const ids = await this.ctx.redis.zrevrange(this.ctx.keys.users(), 0, -1);
    const users = await Promise.all(ids.map((id) => this.get(id)));
    return users.filter((u): u is UserRecord => u !== undefined);
  }

  /** Removes the user's global entries and every key under the user's hash tag. */
  async delete(id: string): Promise<void> {
    const { redis, keys } = this.ctx;
    const user = await this.require(id);
    await redis
      .multi()
      .hdel(keys.apiKeys(), user.api_key_hash)
      .hdel(keys.usernames(), user.username)
      .zrem(keys.users(), id)
      .publish(keys.apiKeyRevocations(), user.api_key_hash)
      .exec();
    this.revocations.emit(user.api_key_hash);
    let cursor = "0";
    do {
      const [next, found] = await redis.scan(cursor, "MATCH", keys.userPattern(id), "COUNT", 500);
      cursor = next;
      if (found.length > 0) await redis.unlink(...found);
    } while (cursor !== "0");
    // Listener caches drop every webhook and workflow of the user, once they are gone from Redis (a cache that
    // read one before the unlink would otherwise keep it).
    await redis.publish(keys.listenerChanges(), listenerChangeMessage(id, "*"));
  }
}
