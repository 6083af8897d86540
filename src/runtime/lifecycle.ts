import { TooManyRequestsError, ValidationError } from "../domain/errors.js";
import type { Logger } from "../observability/logger.js";
import type { ComponentCatalog } from "./ports.js";
import type { ComponentRecord } from "../store/components.js";
import type { SourceRecord } from "../store/sources.js";
import type { SourceRunner } from "./runner.js";
import type { RunMethod, RunResult } from "./sandbox/types.js";
import type { Quotas } from "./quotas.js";
import type { TimerControl } from "./timers.js";
import { KeyedSlots } from "./user-slots.js";

/** Lifecycle hooks of one user at once in this process, by default (SOURCE_HOOK_CONCURRENCY_PER_USER). */
export const DEFAULT_HOOKS_PER_USER = 2;

/** What `prepare` hands to `committed`: the hooks' results, recorded once the source is saved. */
export interface PreparedHooks {
  readonly component: ComponentRecord;
  readonly results: readonly RunResult[];
}

/**
 * Lifecycle hooks (SPEC §5): deploy + activate on create, deactivate + activate on update,
 * deactivate on delete. Hooks run before anything is saved, so a failing hook fails the request
 * cleanly; what they emitted and stored is recorded once the source is committed. A failing
 * deactivate on delete is logged and the deletion goes on (otherwise a broken hook would make a
 * source undeletable).
 *
 * Hooks are metered and capped like runs (docs/security.md, "Fair share"): their sandbox time
 * counts against the user's daily compute time (a create or update over quota answers 429), and
 * at most `hooksPerUser` of one user's hooks run at once in this process. The others wait their
 * turn, up to the sandbox time limit (`hookWaitMs`), then the request answers 429 too_many_hooks:
 * a user's burst of creates with slow hooks queues behind itself, never in front of other users.
 */
export class RuntimeLifecycle {
  private readonly slots: KeyedSlots;

  constructor(
    private readonly runner: SourceRunner,
    private readonly components: ComponentCatalog,
    private readonly timers: TimerControl,
    private readonly logger: Logger,
    private readonly quotas: Quotas,
    private readonly opts: { hooksPerUser?: number; hookWaitMs: number },
  ) {
    this.slots = new KeyedSlots(opts.hooksPerUser ?? DEFAULT_HOOKS_PER_USER);
  }

  /** Runs one hook under the user's hook cap and counts its sandbox time. */
  private async hook(
    source: SourceRecord,
    component: ComponentRecord,
    method: RunMethod,
    db?: Record<string, unknown>,
  ): Promise<RunResult> {
    const userId = source.user_id;
    const quota = await this.quotas.check(userId);
    // Deleting is never refused for quota (deactivate); the hook's time still counts.
    if (!quota.ok && method !== "deactivate") throw new TooManyRequestsError(quota.reason, quota.retryAfterSeconds, "quota_exceeded");
    const plan = quota.ok ? quota.plan : "free";
    if (!(await this.slots.take(userId, this.opts.hookWaitMs))) {
      throw new TooManyRequestsError("too many lifecycle hooks of this user are running right now", 1, "too_many_hooks");
    }
    try {
      const result = await this.runner.execute(source, component, method, undefined, undefined, db);
      await this.quotas.recordCompute(userId, plan, result.durationMs);
      return result;
    } finally {
      this.slots.release(userId);
    }
  }

  /** Runs hooks in order; each sees the db state the previous one left (as Pipedream saves between hooks). */
  private async runHooks(
    source: SourceRecord,
    component: ComponentRecord,
    methods: RunMethod[],
    dbIn?: Record<string, unknown>,
  ): Promise<{ results: RunResult[]; db: Record<string, unknown> | undefined }> {
    const results: RunResult[] = [];
    let db = dbIn;
    for (const method of methods) {
      if (!component.hooks.includes(method)) continue;
      const result = await this.hook(source, component, method, db);
      if (result.error)
        throw new ValidationError(
          `the component's ${method} hook failed: ${result.error.code}: ${result.error.msg.slice(0, 500)}`,
          "hook_failed",
        );
      db = result.db;
      results.push(result);
    }
    return { results, db };
  }

  async prepare(event: "create" | "update", next: SourceRecord, component: ComponentRecord, prev?: SourceRecord): Promise<PreparedHooks> {
    const results: RunResult[] = [];
    let db: Record<string, unknown> | undefined;
    if (event === "update" && prev?.active) {
      const prevComponent =
        prev.component_id === component.id
          ? component
          : await this.components.require(prev.user_id, prev.component_id).catch(() => undefined);
      if (prevComponent) {
        const done = await this.runHooks(prev, prevComponent, ["deactivate"]);
        results.push(...done.results);
        db = done.db;
      }
    }
    const methods: RunMethod[] = event === "create" ? ["deploy"] : [];
    if (next.active) methods.push("activate");
    results.push(...(await this.runHooks(next, component, methods, db)).results);
    return { component, results };
  }

  /** Records what the hooks of `prepared` emitted and stored, and hands the timer to the scheduler. */
  async committed(prepared: PreparedHooks, next: SourceRecord): Promise<void> {
    for (const r of prepared.results) await this.runner.apply(next, prepared.component, r, null, 0);
    await this.timers.request(next.user_id, next.id);
  }

  async removing(source: SourceRecord): Promise<void> {
    if (!source.active) return;
    try {
      const component = await this.components.require(source.user_id, source.component_id);
      if (component.hooks.includes("deactivate")) {
        const r = await this.hook(source, component, "deactivate");
        if (r.error) this.logger.warn({ sourceId: source.id, error: r.error.msg }, "deactivate hook failed; deleting anyway");
      }
    } catch (err) {
      // Too many of the user's hooks at once: the deletion is refused (429), not done without its hook.
      if (err instanceof TooManyRequestsError) throw err;
      this.logger.warn({ err, sourceId: source.id }, "deactivate hook could not run; deleting anyway");
    }
  }

  async removed(source: SourceRecord): Promise<void> {
    await this.timers.request(source.user_id, source.id);
  }
}
