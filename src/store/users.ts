import { hash } from "node:crypto";
import { newId, randomBase62 } from "../domain/ids.js";
import { ConflictError, NotFoundError } from "../domain/errors.js";
import { epochSeconds, parseStored, type StoreContext } from "./context.js";
import { LocalChanges } from "./local-changes.js";
import { listenerChangeMessage } from "./keys.js";
import { unlinkMatching } from "./key-scan.js";
import { defineScript, type ScriptCall } from "./script.js";
import { API_KEY_ROTATE } from "./scripts/api-key-rotate.js";
import { USER_COMMIT } from "./scripts/user-commit.js";
import { USER_RETIRE } from "./scripts/user-retire.js";
import { USERNAME_CLAIM } from "./scripts/username-claim.js";

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

/**
 * The user record as stored in the user's shard. The key state lives in the global `apikey-of`
 * hash (one tag with the key index, so rotation is one atomic step); records written before it
 * still carry `api_key_hash`/`api_key_last4`, read when `apikey-of` has no entry for the user.
 */
type StoredUser = Omit<UserRecord, "api_key_hash" | "api_key_last4"> & Partial<Pick<UserRecord, "api_key_hash" | "api_key_last4">>;

/** One-shot `crypto.hash` (Node 20.12+): about twice as fast as `createHash` for one short string. */
const hashKey = (key: string): string => hash("sha256", key, "hex");

/**
 * Users and their API keys. Keys are stored hashed; lookups go through the hash.
 *
 * A user's record lives in the user's shard, the username claim, the key index, the key state and
 * the user list under the global tag: a create is three ordered steps, each idempotent, and only
 * the last makes the user reachable (docs/decisions.md "Cross-tag writes").
 */
export class UserStore {
  /**
   * The digest of every key that stopped working, in this process; other processes learn it from
   * the `apiKeyRevocations` channel.
   */
  readonly revocations = new LocalChanges();
  private readonly claimScript: ScriptCall;
  private readonly commitScript: ScriptCall;
  private readonly rotateScript: ScriptCall;
  private readonly retireScript: ScriptCall;

  constructor(private readonly ctx: StoreContext) {
    this.claimScript = defineScript(ctx.redis, USERNAME_CLAIM);
    this.commitScript = defineScript(ctx.redis, USER_COMMIT);
    this.rotateScript = defineScript(ctx.redis, API_KEY_ROTATE);
    this.retireScript = defineScript(ctx.redis, USER_RETIRE);
  }

  private newApiKey(): string {
    return `trib_${randomBase62(40, this.ctx.randomBytes)}`;
  }

  /**
   * Three steps, in this order (a crash between two leaves nothing a key reaches, and nothing that
   * blocks a retry):
   * 1. claim the username (global): the claim names the new id; a claim whose user never
   *    committed is taken over, and that user's record dropped;
   * 2. write the user record (the user's shard);
   * 3. commit (global, one script): key index, key state and user list, only if the claim is
   *    still ours; otherwise the record goes and the name is taken.
   */
  async create(input: { username: string; email: string; plan: Plan }): Promise<{ user: UserRecord; apiKey: string }> {
    const { redis, keys } = this.ctx;
    const id = newId("u_", this.ctx.randomBytes);
    const apiKey = this.newApiKey();
    const now = this.ctx.now();
    const stored: StoredUser = {
      id,
      username: input.username,
      email: input.email,
      plan: input.plan,
      created_at: epochSeconds(now),
    };
    const user: UserRecord = { ...stored, api_key_hash: hashKey(apiKey), api_key_last4: apiKey.slice(-4) };
    const taken = () => new ConflictError(`username ${input.username} is taken`, "username_taken");
    const claim = (await this.claimScript([keys.usernames(), keys.users()], [input.username, id])) as string | null;
    if (claim === null) throw taken();
    // An orphan's record (its create stopped after step 2); it can never commit now.
    if (claim !== "") await redis.del(keys.user(claim));
    await redis.set(keys.user(id), JSON.stringify(stored));
    const committed = await this.commitScript(
      [keys.usernames(), keys.apiKeys(), keys.apiKeyOf(), keys.users()],
      [input.username, id, user.api_key_hash, user.api_key_last4, now],
    );
    if (committed !== 1) {
      // Another create took the claim over while this one ran: it has the name.
      await redis.del(keys.user(id));
      throw taken();
    }
    return { user, apiKey };
  }

  /** The user (key state from `apikey-of`, or from the record for users written before it). */
  async get(id: string): Promise<UserRecord | undefined> {
    const { redis, keys } = this.ctx;
    const [raw, state] = await Promise.all([redis.get(keys.user(id)), redis.hget(keys.apiKeyOf(), id)]);
    const stored = parseStored<StoredUser>(raw);
    if (!stored) return undefined;
    const space = state ? state.indexOf(" ") : -1;
    return {
      ...stored,
      api_key_hash: state && space > 0 ? state.slice(0, space) : (stored.api_key_hash ?? ""),
      api_key_last4: state && space > 0 ? state.slice(space + 1) : (stored.api_key_last4 ?? ""),
    };
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
   * One lookup by digest: the index is only written in the step that commits a user (with its
   * key state and list entry) or rotates its key (removing the old digest), so an entry names a
   * live key. Comparing digests rather than keys means timing reveals nothing about the key itself.
   */
  async userOfDigest(digest: string): Promise<string | undefined> {
    return (await this.ctx.redis.hget(this.ctx.keys.apiKeys(), digest)) ?? undefined;
  }

  /**
   * Issues a new key; the old one stops working in the same atomic step (one script on the global
   * tag: index, key state, revocation message). The user record is not written.
   */
  async rotateKey(id: string): Promise<string> {
    const { keys } = this.ctx;
    const user = await this.require(id);
    const apiKey = this.newApiKey();
    const revoked = (await this.rotateScript(
      [keys.apiKeys(), keys.apiKeyOf(), keys.users()],
      [id, hashKey(apiKey), apiKey.slice(-4), user.api_key_hash, keys.apiKeyRevocations()],
    )) as string | null;
    if (revoked === null) throw new NotFoundError("user not found");
    if (revoked !== "") this.revocations.emit(revoked);
    return apiKey;
  }

  async list(): Promise<UserRecord[]> {
    const ids = await this.ctx.redis.zrevrange(this.ctx.keys.users(), 0, -1);
    const users = await Promise.all(ids.map((id) => this.get(id)));
    return users.filter((u): u is UserRecord => u !== undefined);
  }

  /**
   * Removes the user's global entries (one script on the global tag: the key stops working there),
   * then every key under the user's prefix, scanned on the node of the user's slot. A crash in
   * between leaves keys no API key reaches; the record is among them, so deleting again finishes.
   */
  async delete(id: string): Promise<void> {
    const { redis, keys } = this.ctx;
    const user = await this.require(id);
    const revoked = (await this.retireScript(
      [keys.apiKeys(), keys.apiKeyOf(), keys.usernames(), keys.users()],
      [id, user.username, user.api_key_hash, keys.apiKeyRevocations()],
    )) as string;
    if (revoked !== "") this.revocations.emit(revoked);
    await unlinkMatching(redis, keys.userPattern(id), keys.user(id));
    // Listener caches drop every webhook and workflow of the user, once they are gone from Redis (a cache that
    // read one before the unlink would otherwise keep it).
    await redis.publish(keys.listenerChanges(), listenerChangeMessage(id, "*"));
  }
}
