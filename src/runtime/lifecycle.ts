import { ValidationError } from "../domain/errors.js";
import type { Logger } from "../observability/logger.js";
import type { ComponentCatalog } from "./ports.js";
import type { ComponentRecord } from "../store/components.js";
import type { SourceRecord } from "../store/sources.js";
import type { SourceRunner } from "./runner.js";
import type { RunMethod, RunResult } from "./sandbox/types.js";
import type { TimerControl } from "./timers.js";

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
 */
export class RuntimeLifecycle {
  constructor(
    private readonly runner: SourceRunner,
    private readonly components: ComponentCatalog,
    private readonly timers: TimerControl,
    private readonly logger: Logger,
  ) {}

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
      const result = await this.runner.execute(source, component, method, undefined, undefined, db);
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
        const r = await this.runner.execute(source, component, "deactivate");
        if (r.error) this.logger.warn({ sourceId: source.id, error: r.error.msg }, "deactivate hook failed; deleting anyway");
      }
    } catch (err) {
      this.logger.warn({ err, sourceId: source.id }, "deactivate hook could not run; deleting anyway");
    }
  }

  async removed(source: SourceRecord): Promise<void> {
    await this.timers.request(source.user_id, source.id);
  }
}
