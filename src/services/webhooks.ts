import { CLOSED, type CircuitState, circuitView } from "../domain/circuit.js";
import { NotFoundError, ValidationError } from "../domain/errors.js";
import { hasIdShape, type RandomBytes } from "../domain/ids.js";
import type { PageRequest } from "../domain/pagination.js";
import { generateSigningSecret, parseSigningSecret } from "../domain/signing.js";
import { validateWebhookUrl } from "../domain/url-rules.js";
import { parseWebhookSettings, type WebhookSettingRules } from "../domain/webhook-settings.js";
import type { Page } from "../store/listing.js";
import type { DestinationCheck } from "./destinations.js";
import type { SubscriptionStore } from "../store/subscriptions.js";
import type { WebhookPatch, WebhookRecord, WebhookStore } from "../store/webhooks.js";

export type CircuitView = ReturnType<typeof circuitView>;

/** A webhook without circuit state: closed, no failures (SPEC §12). */
export const CLOSED_CIRCUIT: CircuitView = Object.freeze(circuitView(CLOSED, 0));

/**
 * The API shape of a webhook; the list omits user_id and the signing secret. `circuit` is shown
 * by the single-webhook answers (GET, POST, PUT), not by the list; `filtered` by GET alone, once a
 * filter has kept an event from the webhook.
 */
/** What the listener's subscription filters kept from it: how many events, and the latest (SPEC §12 filters). */
export interface FilteredView {
  readonly count: number;
  readonly last_event_id: string;
  /** Seconds since the epoch, as the API's other times. */
  readonly last_at: number;
}

export function webhookView(w: WebhookRecord, detail: boolean, circuit?: CircuitView, filtered?: FilteredView) {
  return {
    id: w.id,
    ...(detail ? { user_id: w.user_id } : {}),
    name: w.name,
    description: w.description,
    url: w.url,
    active: w.active,
    created_at: w.created_at,
    updated_at: w.updated_at,
    ...(detail ? { signing_secret: w.signing_secret } : {}),
    headers: w.headers ?? null,
    timeout_ms: w.timeout_ms ?? null,
    retry_schedule: w.retry_schedule ?? null,
    rate_limit_per_second: w.rate_limit_per_second ?? null,
    ...(circuit ? { circuit } : {}),
    ...(filtered ? { filtered } : {}),
  };
}

/** `GET /webhooks/{id}/secret`: the secret alone. */
export function secretView(w: WebhookRecord) {
  return { signing_secret: w.signing_secret };
}

/**
 * `POST /webhooks/{id}/secret/rotate`: the new secret and when the replaced one stops being used
 * (ISO 8601). Null only for a webhook never rotated whose secret was "rotated" to itself.
 */
export function rotationView(w: WebhookRecord) {
  const until = w.previous_secret_expires_at_ms;
  return { signing_secret: w.signing_secret, previous_secret_expires_at: typeof until === "number" ? new Date(until).toISOString() : null };
}

export interface WebhookServiceOptions {
  /** How long a replaced signing secret stays in effect (WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS, in ms). */
  readonly secretRotationOverlapMs: number;
  /** The check of a webhook's url (services/destinations.ts); none = any valid http(s) URL. */
  readonly checkUrl?: DestinationCheck;
  /** What settings the operator allows (MAX_RETRY_SPAN_HOURS); none = the defaults. */
  readonly settingRules?: WebhookSettingRules;
  /** Health events (events/health.ts): told when a PUT changes `active`; none = not reported. */
  readonly health?: { activeChanged(userId: string, webhookId: string, active: boolean): Promise<void> };
  /** Drops a deleted webhook's event streams (its health events): `EventStore.dropEmitter`. */
  readonly dropEvents?: (userId: string, webhookId: string) => Promise<void>;
  /** Where webhooks' circuit breakers are read (store/circuit.ts); without it, every circuit shows closed. */
  readonly circuits?: { read(userId: string, webhookId: string): Promise<CircuitState> };
  /** After a deletion: releases the deliveries that waited on the webhook's circuit (delivery/circuit.ts `discard`). */
  readonly onDeleted?: (userId: string, webhookId: string) => Promise<void>;
  readonly now?: () => number;
}

function optionalText(raw: unknown, name: string): string | null | undefined {
  if (raw === undefined) return undefined;
  if (raw === null || raw === "") return null;
  if (typeof raw !== "string") throw new ValidationError(`${name} must be a string`);
  if (raw.length > 1000) throw new ValidationError(`${name} must be at most 1000 characters`);
  return raw;
}

export class WebhookService {
  private readonly checkUrl: DestinationCheck;

  constructor(
    private readonly store: WebhookStore,
    private readonly subscriptions: SubscriptionStore,
    private readonly randomBytes: RandomBytes,
    private readonly opts: WebhookServiceOptions,
  ) {
    this.checkUrl = opts.checkUrl ?? validateWebhookUrl;
  }

  create(userId: string, params: Record<string, unknown>): Promise<WebhookRecord> {
    if (params.url === undefined || params.url === "") throw new ValidationError("url is required");
    const url = this.checkUrl(params.url);
    const settings = parseWebhookSettings(params, this.opts.settingRules);
    return this.store.create(userId, {
      settings,
      url,
      name: optionalText(params.name, "name") ?? null,
      description: optionalText(params.description, "description") ?? null,
      signingSecret: this.newSecret(),
    });
  }

  /**
   * Rotates the signing secret to `params.signing_secret` (validated) or a new random one. The
   * replaced secret keeps signing deliveries, beside the new one, for the configured overlap.
   */
  async rotateSecret(userId: string, id: unknown, params: Record<string, unknown>): Promise<WebhookRecord> {
    const chosen = params.signing_secret;
    const secret = chosen === undefined || chosen === null ? this.newSecret() : parseSigningSecret(chosen);
    const current = await this.get(userId, id);
    const rotated = await this.store.rotateSecret(userId, current.id, secret, this.opts.secretRotationOverlapMs);
    if (!rotated) throw new NotFoundError("webhook not found");
    return rotated;
  }

  private newSecret(): string {
    return generateSigningSecret((n) => Buffer.from(this.randomBytes(n)));
  }

  async get(userId: string, id: unknown): Promise<WebhookRecord> {
    const w = hasIdShape(id, "wh_") ? await this.store.get(userId, id) : undefined;
    if (!w) throw new NotFoundError("webhook not found");
    return w;
  }

  /** The webhook's circuit breaker as the API shows it (SPEC §12). */
  async circuit(userId: string, webhookId: string): Promise<CircuitView> {
    const { circuits, now = Date.now } = this.opts;
    return circuits ? circuitView(await circuits.read(userId, webhookId), now()) : CLOSED_CIRCUIT;
  }

  /** The events the webhook's subscription filters kept from it (counted by fan-out); undefined while none was. */
  async filtered(userId: string, webhookId: string): Promise<FilteredView | undefined> {
    const f = await this.subscriptions.filteredOf(userId, webhookId);
    return f && { count: f.count, last_event_id: f.lastEventId, last_at: Math.floor(f.lastAtMs / 1000) };
  }

  list(userId: string, page: PageRequest): Promise<Page<WebhookRecord>> {
    return this.store.list(userId, page);
  }

  async update(userId: string, id: unknown, params: Record<string, unknown>): Promise<WebhookRecord> {
    const current = await this.get(userId, id);
    // Like name and description: an absent setting stays, null or "" clears it (the default).
    const patch: WebhookPatch = parseWebhookSettings(params, this.opts.settingRules);
    if (params.url !== undefined) patch.url = this.checkUrl(params.url);
    const name = optionalText(params.name, "name");
    if (name !== undefined) patch.name = name;
    const description = optionalText(params.description, "description");
    if (description !== undefined) patch.description = description;
    if (params.active !== undefined) {
      if (params.active === true || params.active === "true") patch.active = true;
      else if (params.active === false || params.active === "false") patch.active = false;
      else throw new ValidationError("active must be a boolean");
    }
    const updated = await this.store.update(userId, current.id, patch);
    if (!updated) throw new NotFoundError("webhook not found");
    // Compared with the record this request read: a 410 landing between the read and the write
    // may make the change look like none (the receiver's own $webhook_disabled still reports it).
    if (updated.active !== current.active) await this.opts.health?.activeChanged(userId, updated.id, updated.active);
    return updated;
  }

  /** Marks a webhook inactive (410 Gone from its receiver). Missing webhooks are ignored. */
  async deactivate(userId: string, id: string): Promise<void> {
    await this.store.update(userId, id, { active: false });
  }

  async delete(userId: string, id: unknown): Promise<void> {
    const w = await this.get(userId, id);
    await this.store.delete(userId, w.id);
    await this.subscriptions.deleteNaming(userId, w.id);
    await this.opts.dropEvents?.(userId, w.id);
    await this.opts.onDeleted?.(userId, w.id);
  }
}
