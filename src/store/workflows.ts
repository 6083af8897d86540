import { limitReached, UNLIMITED, type UserLimits } from "../domain/limits.js";
import { CAPPED_INSERT } from "./scripts/capped-insert.js";
import { COMPARE_AND_SET } from "./scripts/compare-and-set.js";
import { epochSeconds, parseStored, type StoreContext } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { LocalChanges } from "./local-changes.js";
import { listenerChangeMessage } from "./keys.js";
import { loadJson, pageFromSortedSet, type Page } from "./listing.js";
import type { PageRequest } from "../domain/pagination.js";

export interface WorkflowRecord {
  id: string;
  name: string | null;
  trigger_url: string | null;
  created_at: number;
  updated_at: number;
}

/** Compare-and-set rounds an update may lose to concurrent ones before it gives up (500). */
const UPSERT_ATTEMPTS = 50;

/** Workflows are chosen by the caller and registered the first time they are seen (SPEC §3). */
export class WorkflowStore {
  /**
   * The change message of every update or deletion made through this store, in this process;
   * other processes read it on `listenerChanges`.
   * Registering a new workflow changes nothing a cache can hold (caches never keep misses).
   */
  readonly changes = new LocalChanges();

  private readonly cappedInsert: ScriptCall;
  private readonly compareAndSet: ScriptCall;

  constructor(
    private readonly ctx: StoreContext,
    /** Uses workflows. */
    private readonly limits: UserLimits = UNLIMITED,
  ) {
    this.cappedInsert = defineScript(ctx.redis, CAPPED_INSERT);
    this.compareAndSet = defineScript(ctx.redis, COMPARE_AND_SET);
  }

  key(userId: string, id: string): string {
    return this.ctx.keys.workflow(userId, id);
  }

  async get(userId: string, id: string): Promise<WorkflowRecord | undefined> {
    return parseStored<WorkflowRecord>(await this.ctx.redis.get(this.ctx.keys.workflow(userId, id)));
  }

  /**
   * Registers the workflow if it is new; true when this call registered it. At most
   * `limits.workflows` per user: a new one past it is refused with 429 `limit_exceeded`, checked in the
   * same atomic step as the write (store/capped-insert-lua.ts).
   */
  async register(userId: string, id: string): Promise<boolean> {
    const max = this.limits.workflows;
    const now = this.ctx.now();
    const record: WorkflowRecord = { id, name: null, trigger_url: null, created_at: epochSeconds(now), updated_at: epochSeconds(now) };
    // An existing record is left as it is; a missing list entry is restored with its first-seen time.
    const [status, count] = (await this.cappedInsert(
      [this.ctx.keys.workflow(userId, id), this.ctx.keys.workflows(userId)],
      [id, now, JSON.stringify(record), max],
    )) as [number, number];
    if (status === -1) throw limitReached("workflows", count, max);
    return status === 1;
  }

  async upsert(
    userId: string,
    id: string,
    patch: { name?: string | null; trigger_url?: string | null },
  ): Promise<{ workflow: WorkflowRecord; created: boolean }> {
    // register() is the single place that creates a workflow record (atomically with its list entry).
    let created = await this.register(userId, id);
    const key = this.ctx.keys.workflow(userId, id);
    // Listener caches learn of the change from the message published in the same step.
    const message = listenerChangeMessage(userId, id);
    // Read, patch, write only if nothing changed meanwhile: two concurrent PUTs each keep their
    // fields instead of the later one writing back what it read before the other's write.
    for (let attempt = 0; ; attempt++) {
      const raw = await this.ctx.redis.get(key);
      if (raw === null) {
        // Deleted since it was registered: register it again (with its list entry), then patch.
        created = (await this.register(userId, id)) || created;
        if (attempt >= UPSERT_ATTEMPTS) throw new Error(`workflow ${id} kept changing under its update`);
        continue;
      }
      const workflow = parseStored<WorkflowRecord>(raw);
      const nowS = epochSeconds(this.ctx.now());
      const next: WorkflowRecord = {
        ...(workflow ?? { id, name: null, trigger_url: null, created_at: nowS, updated_at: nowS }),
        ...(patch.name !== undefined ? { name: patch.name } : {}),
        ...(patch.trigger_url !== undefined ? { trigger_url: patch.trigger_url } : {}),
        updated_at: nowS,
      };
      const written = await this.compareAndSet([key], [raw, JSON.stringify(next), this.ctx.keys.listenerChanges(), message]);
      if (written === 1) {
        this.changes.emit(message);
        return { workflow: next, created };
      }
      if (attempt >= UPSERT_ATTEMPTS) throw new Error(`workflow ${id} kept changing under its update`);
    }
  }

  async list(userId: string, page: PageRequest): Promise<Page<WorkflowRecord>> {
    const { redis, keys } = this.ctx;
    return pageFromSortedSet(redis, keys.workflows(userId), page, (ids) =>
      loadJson<WorkflowRecord>(
        redis,
        ids.map((id) => keys.workflow(userId, id)),
      ),
    );
  }

  async delete(userId: string, id: string): Promise<boolean> {
    const { redis, keys } = this.ctx;
    const message = listenerChangeMessage(userId, id);
    const res = await redis
      .multi()
      .del(keys.workflow(userId, id))
      .zrem(keys.workflows(userId), id)
      .publish(keys.listenerChanges(), message)
      .exec();
    this.changes.emit(message);
    return Number(res?.[0]?.[1] ?? 0) > 0;
  }
}
