import { NotFoundError, ValidationError } from "../domain/errors.js";
import { hasIdShape, isWorkflowId } from "../domain/ids.js";
import type { SourceStore } from "../store/sources.js";
import type { AutoSubscriptionRecord, SubscriptionRecord, SubscriptionStore } from "../store/subscriptions.js";
import type { WebhookStore } from "../store/webhooks.js";
import type { WorkflowService } from "./workflows.js";

const GLOBS = new Set(["dc_*", "p_*"]);

/** event_name: any channel name, "" for the default stream. */
export function parseEventName(raw: unknown, { required }: { required: boolean }): string {
  if (raw === undefined || raw === null) {
    if (required) throw new ValidationError("event_name is required");
    return "";
  }
  if (typeof raw !== "string") throw new ValidationError("event_name must be a string");
  if (raw.length > 200) throw new ValidationError("event_name must be at most 200 characters");
  if (/[\u0000-\u001f\u007f]/.test(raw)) throw new ValidationError("event_name must not contain control characters");
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

  /** Emitter: an owned dc_ or p_ id, or a glob. Workflows are registered when first named. */
  private async checkEmitter(userId: string, raw: unknown): Promise<string> {
    const id = requireString(raw, "emitter_id");
    if (GLOBS.has(id)) return id;
    if (hasIdShape(id, "dc_")) {
      if (!(await this.sources.get(userId, id))) throw new NotFoundError(`emitter ${id} not found`);
      return id;
    }
    if (isWorkflowId(id)) {
      await this.workflows.ensure(userId, id);
      return id;
    }
    throw new ValidationError("emitter_id must be a source id (dc_...), a workflow id (p_...), dc_* or p_*");
  }

  /** Listener: an owned dc_, p_ or wh_ id. */
  private async checkListener(userId: string, raw: unknown): Promise<string> {
    const id = requireString(raw, "listener_id");
    if (hasIdShape(id, "dc_")) {
      if (!(await this.sources.get(userId, id))) throw new NotFoundError(`listener ${id} not found`);
      return id;
    }
    if (hasIdShape(id, "wh_")) {
      if (!(await this.webhooks.get(userId, id))) throw new NotFoundError(`listener ${id} not found`);
      return id;
    }
    if (isWorkflowId(id)) {
      await this.workflows.ensure(userId, id);
      return id;
    }
    throw new ValidationError("listener_id must be a source (dc_...), workflow (p_...) or webhook (wh_...) id");
  }

  async create(userId: string, params: Record<string, unknown>): Promise<SubscriptionRecord> {
    // Validate shapes before any lookup, so a malformed id is a 400 even when the other is foreign.
    const eventName = parseEventName(params.event_name, { required: false });
    requireString(params.emitter_id, "emitter_id");
    requireString(params.listener_id, "listener_id");
    const listener = await this.checkListener(userId, params.listener_id);
    const emitter = await this.checkEmitter(userId, params.emitter_id);
    return this.store.create(userId, emitter, listener, eventName);
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
    const listener = await this.checkListener(userId, params.listener_id);
    return this.store.createAuto(userId, listener, eventName);
  }
}
