import { NotFoundError, ValidationError } from "../domain/errors.js";
import { isWorkflowId } from "../domain/ids.js";
import type { PageRequest } from "../domain/pagination.js";
import { validateWebhookUrl } from "../domain/url-rules.js";
import type { Page } from "../store/listing.js";
import type { DestinationCheck } from "./destinations.js";
import type { SubscriptionStore } from "../store/subscriptions.js";
import type { WorkflowRecord, WorkflowStore } from "../store/workflows.js";

export function parseWorkflowId(raw: unknown): string {
  if (!isWorkflowId(raw)) throw new ValidationError("workflow_id must be p_ followed by 1-64 characters of [A-Za-z0-9_-]");
  return raw;
}

/** Workflows: registered when first seen; auto-subscriptions apply at that moment (SPEC §3). */
export class WorkflowService {
  constructor(
    private readonly store: WorkflowStore,
    private readonly subscriptions: SubscriptionStore,
    private readonly events: { dropEmitter(userId: string, emitterId: string): Promise<void> },
    /** The check of a trigger_url (services/destinations.ts). */
    private readonly checkUrl: DestinationCheck = validateWebhookUrl,
  ) {}

  /** Registers a workflow on first sight and applies auto-subscriptions before it emits anything. */
  async ensure(userId: string, id: string): Promise<void> {
    if (await this.store.register(userId, id)) await this.applyAuto(userId, id);
  }

  /**
   * Applies auto-subscriptions to a workflow this request registered. When a subscription limit
   * refuses one, the registration is undone (with the subscriptions made so far), so the request
   * fails whole with that 429 and a later one registers the workflow afresh.
   */
  private async applyAuto(userId: string, id: string): Promise<void> {
    try {
      await this.subscriptions.applyAuto(userId, id);
    } catch (err) {
      await this.store.delete(userId, id);
      await this.subscriptions.deleteNaming(userId, id);
      throw err;
    }
  }

  /** The Redis key of the workflow record (its existence means "registered"). */
  recordKey(userId: string, id: string): string {
    return this.store.key(userId, id);
  }

  async upsert(userId: string, rawId: unknown, params: Record<string, unknown>): Promise<WorkflowRecord> {
    const id = parseWorkflowId(rawId);
    const patch: { name?: string | null; trigger_url?: string | null } = {};
    if (params.name !== undefined) {
      if (params.name !== null && (typeof params.name !== "string" || params.name.length > 200)) {
        throw new ValidationError("name must be a string of at most 200 characters");
      }
      patch.name = params.name;
    }
    if (params.trigger_url !== undefined) {
      patch.trigger_url =
        params.trigger_url === null || params.trigger_url === "" ? null : this.checkUrl(params.trigger_url, "trigger_url");
    }
    const { workflow, created } = await this.store.upsert(userId, id, patch);
    if (created) await this.applyAuto(userId, id);
    return workflow;
  }

  async get(userId: string, rawId: unknown): Promise<WorkflowRecord> {
    const id = parseWorkflowId(rawId);
    const w = await this.store.get(userId, id);
    if (!w) throw new NotFoundError(`workflow ${id} not found`);
    return w;
  }

  list(userId: string, page: PageRequest): Promise<Page<WorkflowRecord>> {
    return this.store.list(userId, page);
  }

  async delete(userId: string, rawId: unknown): Promise<void> {
    const id = parseWorkflowId(rawId);
    if (!(await this.store.delete(userId, id))) throw new NotFoundError(`workflow ${id} not found`);
    await this.subscriptions.deleteNaming(userId, id);
    await this.events.dropEmitter(userId, id);
  }
}
