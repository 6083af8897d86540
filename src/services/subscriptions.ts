import { channelNameProblem } from "../domain/channel-name.js";
import { NotFoundError, ValidationError } from "../domain/errors.js";
import { hasIdShape, isWorkflowId } from "../domain/ids.js";
import { parseSubscriptionFilter } from "../domain/subscription-filter.js";
import type { SourceStore } from "../store/sources.js";
import type { AutoSubscriptionRecord, SubscriptionRecord, SubscriptionStore } from "../store/subscriptions.js";
import type { WebhookStore } from "../store/webhooks.js";
import type { WorkflowService } from "./workflows.js";

/** Emitter globs: every source, every workflow, every webhook (its health events, SPEC §12) of the user. */
const GLOBS = new Set(["dc_*", "p_*", "wh_*"]);

/** event_name: any channel name (domain/channel-name.ts, the rule the ingress applies too), "" for the default stream. */
export function parseEventName(raw: unknown, { required }: { required: boolean }): string {
  if (raw === undefined || raw === null) {
    if (required) throw new ValidationError("event_name is required");
    return "";
  }
  if (typeof raw !== "string") throw new ValidationError("event_name must be a string");
  const problem = channelNameProblem(raw);
  if (problem) throw new ValidationError(`event_name ${problem}`);
  return raw;
}

function requireString(raw: unknown, name: string): string {
  if (raw === undefined || raw === null || raw === "") throw new ValidationError(`${name} is required`);
  if (typeof raw !== "string") throw new ValidationError(`${name} must be a string`);
  return raw;
}

/** Subscriptions and auto-subscriptions, with the ownership rules of SPEC §2. */
export class SubscriptionService {
  constructor(
    private readonly store: SubscriptionStore,
    private readonly sources: SourceStore,
    private readonly webhooks: WebhookStore,
    private readonly workflows: WorkflowService,
  ) {}

  /** Emitter shape: a dc_, p_ or wh_ (health events) id, or a glob. */
  private emitterShape(raw: unknown): string {
    const id = requireString(raw, "emitter_id");
    if (GLOBS.has(id) || hasIdShape(id, "dc_") || hasIdShape(id, "wh_") || isWorkflowId(id)) return id;
    throw new ValidationError("emitter_id must be a source id (dc_...), a workflow id (p_...), a webhook id (wh_...), dc_*, p_* or wh_*");
  }

  /** Listener shape: a dc_, p_ or wh_ id. */
  private listenerShape(raw: unknown): string {
    const id = requireString(raw, "listener_id");
    if (hasIdShape(id, "dc_") || hasIdShape(id, "wh_") || isWorkflowId(id)) return id;
    throw new ValidationError("listener_id must be a source (dc_...), workflow (p_...) or webhook (wh_...) id");
  }

  /** Sources and webhooks must exist and be the user's (404 otherwise); workflows need not. */
  private async requireOwned(userId: string, id: string, role: "emitter" | "listener"): Promise<void> {
    const found = GLOBS.has(id)
      ? true
      : id.startsWith("dc_")
        ? await this.sources.get(userId, id)
        : id.startsWith("wh_")
          ? await this.webhooks.get(userId, id)
          : true;
    if (!found) throw new NotFoundError(`${role} ${id} not found`);
  }

  /** Workflows are registered when a subscription first names them, after every check passed. */
  private async registerWorkflows(userId: string, ...ids: string[]): Promise<void> {
    for (const id of ids) if (isWorkflowId(id)) await this.workflows.ensure(userId, id);
  }

  async create(userId: string, params: Record<string, unknown>): Promise<SubscriptionRecord> {
    // Every shape is checked before any lookup, and every lookup before anything is written.
    const eventName = parseEventName(params.event_name, { required: false });
    const emitter = this.emitterShape(params.emitter_id);
    const listener = this.listenerShape(params.listener_id);
    // Absent: a re-posted triple keeps its filter; given (null clears): it replaces it.
    const filter = parseSubscriptionFilter(params.filter);
    await this.requireOwned(userId, listener, "listener");
    await this.requireOwned(userId, emitter, "emitter");
    await this.registerWorkflows(userId, listener, emitter);
    return this.store.create(userId, emitter, listener, eventName, filter);
  }

  async delete(userId: string, params: Record<string, unknown>): Promise<void> {
    const emitter = requireString(params.emitter_id, "emitter_id");
    const listener = requireString(params.listener_id, "listener_id");
    const eventName = parseEventName(params.event_name, { required: false });
    if (!(await this.store.deleteTriple(userId, emitter, listener, eventName))) {
      throw new NotFoundError("no subscription matches emitter_id, listener_id and event_name");
    }
  }

  list(userId: string): Promise<SubscriptionRecord[]> {
    return this.store.list(userId);
  }

  async createAuto(userId: string, params: Record<string, unknown>): Promise<AutoSubscriptionRecord> {
    const eventName = parseEventName(params.event_name, { required: true });
    const listener = this.listenerShape(params.listener_id);
    await this.requireOwned(userId, listener, "listener");
    await this.registerWorkflows(userId, listener);
    return this.store.createAuto(userId, listener, eventName);
  }
}
