import type { ComponentRecord } from "./components.js";
import { FeedCache, type FeedCacheOptions } from "./invalidation-feed.js";
import type { EndpointTarget, SourceRecord, SourceStore } from "./sources.js";
import type { Plan } from "./users.js";

export type SourceCacheOptions = FeedCacheOptions;

/** A component as a run and an HTTP request use it: without its source code (kept in Redis only). */
export type RunComponent = Omit<ComponentRecord, "code">;

type Cached =
  | { readonly kind: "source"; readonly userId: string; readonly value: SourceRecord }
  | { readonly kind: "endpoint"; readonly userId: string; readonly value: EndpointTarget }
  | { readonly kind: "component"; readonly userId: string; readonly value: RunComponent }
  | { readonly kind: "plan"; readonly userId: string; readonly value: Plan };

/**
 * What every HTTP source request and every source run read, without a Redis read each time
 * (docs/decisions.md "HTTP-source relay cost"): the endpoint token's target, the source, its
 * component and its user's plan. Kept honest like the listener cache (listener-cache.ts), on the
 * same channel: a source's save or deletion publishes "<user id> <source id>" in its transaction
 * (this process drops it before the change's caller resumes), a user's deletion "<user id> *"
 * once the user's keys are gone. Used only while the subscription is live; misses are never kept;
 * entries older than `maxAgeMs` are read again.
 *
 * Only the source can change under an entry: a token always leads to the same source (the caller
 * checks the source still holds it), a component never changes once saved (another code is
 * another component), a user's plan is set at creation. Those go with their user's deletion.
 */
export class SourceCache extends FeedCache<Cached> {
  constructor(
    private readonly sources: SourceStore,
    opts: SourceCacheOptions,
  ) {
    super(opts, "source cache");
  }

  /** "<user id> <id>" drops one source, "<user id> *" everything of the user's. */
  protected drop(message: string): void {
    const space = message.indexOf(" ");
    const userId = message.slice(0, space);
    const id = message.slice(space + 1);
    if (space <= 0) this.cache.clear();
    else if (id === "*") this.cache.invalidateWhere((e) => e.userId === userId);
    else if (id.startsWith("dc_")) this.cache.invalidate(`s ${userId} ${id}`);
  }

  protected listenLocally(): void {
    this.sources.changes.listen((message) => this.drop(message));
  }

  /** Same contract as `SourceStore.get`. */
  async get(userId: string, id: string): Promise<SourceRecord | undefined> {
    const e = await this.lookup(`s ${userId} ${id}`, async () => {
      const value = await this.sources.get(userId, id);
      return value && { kind: "source", userId, value };
    });
    return e?.kind === "source" ? e.value : undefined;
  }

  /** Same contract as `SourceStore.endpoint`: the caller checks the source still holds the token. */
  async endpoint(token: string): Promise<EndpointTarget | undefined> {
    const e = await this.lookup(`e ${token}`, async () => {
      const value = await this.sources.endpoint(token);
      return value && { kind: "endpoint", userId: value.userId, value };
    });
    return e?.kind === "endpoint" ? e.value : undefined;
  }

  /** The user's component `id` through `load` (which throws when there is none). */
  async component(userId: string, id: string, load: () => Promise<ComponentRecord>): Promise<RunComponent> {
    const e = await this.lookup(`c ${userId} ${id}`, async () => {
      const { code: _code, ...value } = await load();
      return { kind: "component", userId, value };
    });
    if (e?.kind !== "component") throw new Error(`component ${id}: cache entry of another kind`);
    return e.value;
  }

  /** The user's plan through `load`; undefined for a user who does not exist (not kept). */
  async plan(userId: string, load: () => Promise<Plan | undefined>): Promise<Plan | undefined> {
    const e = await this.lookup(`u ${userId}`, async () => {
      const value = await load();
      return value && { kind: "plan", userId, value };
    });
    return e?.kind === "plan" ? e.value : undefined;
  }
}
