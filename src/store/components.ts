import type { PropDefinition } from "../domain/props.js";
import { newId } from "../domain/ids.js";
import { epochSeconds, parseStored, type StoreContext } from "./context.js";

export interface ComponentRecord {
  id: string;
  user_id: string;
  key: string | null;
  code: string;
  code_hash: string;
  name: string;
  version: string;
  description: string | null;
  configurable_props: PropDefinition[];
  dedupe: "unique" | "greatest" | "last" | null;
  hooks: string[];
  component_url: string | null;
  created_at: number;
  updated_at: number;
}

export type NewComponent = Omit<ComponentRecord, "id" | "user_id" | "created_at" | "updated_at">;

/** Saved components of each user, with indexes by code hash (dedupe) and by key (newest wins). */
export class ComponentStore {
  constructor(private readonly ctx: StoreContext) {}

  async get(userId: string, id: string): Promise<ComponentRecord | undefined> {
    return parseStored<ComponentRecord>(await this.ctx.redis.get(this.ctx.keys.component(userId, id)));
  }

  /** The compiled (bundled CommonJS) form of the code, ready for the sandbox. */
  async compiled(userId: string, id: string): Promise<string | undefined> {
    return (await this.ctx.redis.get(this.ctx.keys.componentCompiled(userId, id))) ?? undefined;
  }

  async getByHash(userId: string, codeHash: string): Promise<ComponentRecord | undefined> {
    const id = await this.ctx.redis.hget(this.ctx.keys.componentsByHash(userId), codeHash);
    return id ? this.get(userId, id) : undefined;
  }

  /** The newest of the user's components with that key. */
  async getByKey(userId: string, key: string): Promise<ComponentRecord | undefined> {
    const id = await this.ctx.redis.hget(this.ctx.keys.componentsByKey(userId), key);
    return id ? this.get(userId, id) : undefined;
  }

  /**
   * Saves a component unless the user already has one with the same code hash, in which case that
   * one is returned. The hash index is claimed with HSETNX so concurrent identical posts agree.
   */
  async saveOrGet(userId: string, input: NewComponent, compiled: string): Promise<ComponentRecord> {
    const { redis, keys } = this.ctx;
    const id = newId("sc_", this.ctx.randomBytes);
    const claimed = await redis.hsetnx(keys.componentsByHash(userId), input.code_hash, id);
    if (claimed === 0) {
      const existing = await this.getByHash(userId, input.code_hash);
      if (existing) return existing;
      // The index names a component that is gone (half-deleted): take the slot over.
      await redis.hset(keys.componentsByHash(userId), input.code_hash, id);
    }
    const now = this.ctx.now();
    const record: ComponentRecord = { ...input, id, user_id: userId, created_at: epochSeconds(now), updated_at: epochSeconds(now) };
    const tx = redis
      .multi()
      .set(keys.component(userId, id), JSON.stringify(record))
      .set(keys.componentCompiled(userId, id), compiled)
      .zadd(keys.components(userId), now, id);
    if (record.key) tx.hset(keys.componentsByKey(userId), record.key, id);
    await tx.exec();
    return record;
  }
}
