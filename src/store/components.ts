import type { PropDefinition } from "../domain/props.js";
import { newId } from "../domain/ids.js";
import { atLimit, componentBytesExceeded, limitReached, UNLIMITED, type UserLimits } from "../domain/limits.js";
import { COMPONENT_SAVE } from "./scripts/component-save.js";
import { epochSeconds, parseStored, type StoreContext } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";

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

/**
 * Saved components of each user, with indexes by code hash (dedupe) and by key (newest wins), and
 * the bytes each one stores (for the component_bytes limit).
 */
export class ComponentStore {
  private readonly save: ScriptCall;

  constructor(
    private readonly ctx: StoreContext,
    /** Uses components and componentBytes. */
    private readonly limits: UserLimits = UNLIMITED,
  ) {
    this.save = defineScript(ctx.redis, COMPONENT_SAVE);
  }

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

  /** How many components the user has and the bytes they store (record + compiled bundle each). */
  async usage(userId: string): Promise<{ count: number; bytes: number }> {
    await this.backfillSizes(userId);
    const { redis, keys } = this.ctx;
    const [count, sizes] = await Promise.all([redis.zcard(keys.components(userId)), redis.hvals(keys.componentSizes(userId))]);
    return { count, bytes: sizes.reduce((sum, v) => sum + (Number(v) || 0), 0) };
  }

  /**
   * Components saved before sizes were recorded have no entry in the sizes hash: measure them
   * (STRLEN of the record and the compiled bundle, which never change) and record them, so the
   * byte limit counts everything the user stores. A no-op, one round trip, once every one has a size.
   */
  private async backfillSizes(userId: string): Promise<void> {
    const { redis, keys } = this.ctx;
    const [listed, sized] = await Promise.all([redis.zcard(keys.components(userId)), redis.hlen(keys.componentSizes(userId))]);
    if (sized >= listed) return;
    const [ids, known] = await Promise.all([redis.zrange(keys.components(userId), 0, -1), redis.hkeys(keys.componentSizes(userId))]);
    const have = new Set(known);
    const missing = ids.filter((id) => !have.has(id));
    const lengths = await Promise.all(
      missing.map((id) => Promise.all([redis.strlen(keys.component(userId, id)), redis.strlen(keys.componentCompiled(userId, id))])),
    );
    await Promise.all(
      missing.map((id, i) => {
        const [record, compiled] = lengths[i] ?? [0, 0];
        // HSETNX: a size recorded meanwhile (by another backfill) is the same number anyway.
        return record > 0 ? redis.hsetnx(keys.componentSizes(userId), id, record + compiled) : Promise.resolve(0);
      }),
    );
  }

  /**
   * Refuses early, before the costly analysis of new code, when the user is already at the
   * component count limit or when `codeBytes` alone cannot fit in the bytes left. Not atomic:
   * `saveOrGet` checks again in the same step as the write.
   */
  async checkRoom(userId: string, codeBytes: number): Promise<void> {
    const { components: maxCount, componentBytes: maxBytes } = this.limits;
    if (maxCount === 0 && maxBytes === 0) return;
    const used = await this.usage(userId);
    if (atLimit(used.count, maxCount)) throw limitReached("components", used.count, maxCount);
    if (maxBytes > 0 && used.bytes + codeBytes > maxBytes) throw componentBytesExceeded(used.bytes, codeBytes, maxBytes);
  }

  /**
   * Saves a component unless the user already has one with the same code hash, in which case that
   * one is returned. The hash claim, both limits and the writes are one atomic step
   * (store/component-save-lua.ts), so concurrent identical posts agree and concurrent creates
   * cannot pass a limit together.
   */
  async saveOrGet(userId: string, input: NewComponent, compiled: string): Promise<ComponentRecord> {
    const { keys } = this.ctx;
    const { components: maxCount, componentBytes: maxBytes } = this.limits;
    const id = newId("sc_", this.ctx.randomBytes);
    const now = this.ctx.now();
    const record: ComponentRecord = { ...input, id, user_id: userId, created_at: epochSeconds(now), updated_at: epochSeconds(now) };
    const json = JSON.stringify(record);
    const size = Buffer.byteLength(json) + Buffer.byteLength(compiled);
    if (maxBytes > 0 && size > maxBytes) throw componentBytesExceeded(0, size, maxBytes);
    if (maxBytes > 0) await this.backfillSizes(userId);
    let takeOver = "";
    for (let attempt = 0; attempt < 3; attempt++) {
      const [outcome, value] = (await this.save(
        [
          keys.componentsByHash(userId),
          keys.components(userId),
          keys.componentSizes(userId),
          keys.component(userId, id),
          keys.componentCompiled(userId, id),
          keys.componentsByKey(userId),
        ],
        [input.code_hash, id, now, json, compiled, record.key ?? "", maxCount, maxBytes, takeOver],
      )) as [string, string];
      if (outcome === "created") return record;
      if (outcome === "count") throw limitReached("components", Number(value), maxCount);
      if (outcome === "bytes") throw componentBytesExceeded(Number(value), size, maxBytes);
      const existing = await this.get(userId, value);
      if (existing) return existing;
      // The index names a component that is gone (half-deleted): take that claim over.
      takeOver = value;
    }
    throw new Error(`component with hash ${input.code_hash} could not be saved`);
  }
}
