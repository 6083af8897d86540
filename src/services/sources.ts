import { NotFoundError, ValidationError } from "../domain/errors.js";
import { hasIdShape, newId, type RandomBytes } from "../domain/ids.js";
import { configuredInboundAuth, type InboundAuth, inboundAuthView } from "../domain/inbound-auth.js";
import type { PageRequest } from "../domain/pagination.js";
import { validateConfiguredProps } from "../domain/props.js";
import type { ComponentRecord } from "../store/components.js";
import { epochSeconds } from "../store/context.js";
import type { Page } from "../store/listing.js";
import type { SourceRecord, SourceStore } from "../store/sources.js";
import type { SubscriptionStore } from "../store/subscriptions.js";
import type { ComponentSelection, ComponentService } from "./components.js";

/**
 * What happens around a source's life beyond the store: lifecycle hooks in the sandbox and timer
 * scheduling. `prepare` runs before anything is saved, so a failing hook leaves nothing half-made.
 */
export interface SourceLifecycle {
  /** Runs the hooks; returns what `committed` records once the source is saved (opaque here). */
  prepare(event: "create" | "update", next: SourceRecord, component: ComponentRecord, prev?: SourceRecord): Promise<unknown>;
  /** Records what the prepared hooks did; a prepare whose source was never saved is simply dropped. */
  committed(prepared: unknown, next: SourceRecord, prev?: SourceRecord): Promise<void>;
  removing(source: SourceRecord): Promise<void>;
  removed(source: SourceRecord): Promise<void>;
}

export interface SourceInput extends ComponentSelection {
  name?: unknown;
  configured_props?: unknown;
  active?: unknown;
}

/** The API shape of a source; `user_id` only where the document shows it (create/update). */
export function sourceView(s: SourceRecord, withUser: boolean) {
  return {
    id: s.id,
    ...(withUser ? { user_id: s.user_id } : {}),
    component_id: s.component_id,
    configured_props: s.configured_props,
    active: s.active,
    created_at: s.created_at,
    updated_at: s.updated_at,
    name: s.name,
    name_slug: s.name_slug,
  };
}

function parseName(raw: unknown, component: ComponentRecord, slugOf: (s: string) => string): string {
  if (raw === undefined || raw === null || raw === "") return slugOf(component.name);
  if (typeof raw !== "string") throw new ValidationError("name must be a string");
  if (raw.length > 200) throw new ValidationError("name must be at most 200 characters");
  if (raw.trim() === "") throw new ValidationError("name must not be blank");
  return raw;
}

function parseActive(raw: unknown): boolean {
  if (raw === undefined || raw === null || raw === "") return true;
  if (raw === true || raw === "true") return true;
  if (raw === false || raw === "false") return false;
  throw new ValidationError("active must be a boolean");
}

export class SourceService {
  constructor(
    private readonly store: SourceStore,
    private readonly components: ComponentService,
    private readonly subscriptions: SubscriptionStore,
    private readonly lifecycle: SourceLifecycle,
    private readonly opts: {
      /** ENDPOINT_URL (PUBLIC_URL by default): the base of every endpoint_url. */
      endpointUrl: string;
      timerMinIntervalSeconds: number;
      now: () => number;
      randomBytes: RandomBytes;
      slugify: (s: string) => string;
    },
  ) {}

  async get(userId: string, id: unknown): Promise<SourceRecord> {
    if (!hasIdShape(id, "dc_")) throw new NotFoundError("source not found");
    const s = await this.store.get(userId, id);
    if (!s) throw new NotFoundError(`source ${id} not found`);
    return s;
  }

  list(userId: string, page: PageRequest): Promise<Page<SourceRecord>> {
    return this.store.list(userId, page);
  }

  /**
   * Builds configured_props as stored and shown: validated values plus the HTTP endpoint URL and,
   * when set, its inbound verification without the secret (SPEC §12). The auth with its secret
   * comes back apart, to be stored beside them (`http_auth`) and never shown.
   */
  private configure(
    component: ComponentRecord,
    raw: unknown,
    token: string | null,
    currentAuth: InboundAuth | null,
  ): { props: Record<string, unknown>; httpProp: string | null; auth: InboundAuth | null } {
    const props = validateConfiguredProps(component.configurable_props, raw, {
      timerMinIntervalSeconds: this.opts.timerMinIntervalSeconds,
    });
    const http = component.configurable_props.find((p) => p.type === "$.interface.http");
    let auth: InboundAuth | null = null;
    if (http) {
      const given = isPlainObject(raw) && Object.hasOwn(raw, http.name) ? raw[http.name] : undefined;
      const rawAuth = isPlainObject(given) ? given.auth : undefined;
      auth = configuredInboundAuth(rawAuth, currentAuth, `configured_props.${http.name}.auth`);
    }
    if (http && token) {
      props[http.name] = { endpoint_url: `${this.opts.endpointUrl}/e/${token}`, ...(auth ? { auth: inboundAuthView(auth) } : {}) };
    }
    return { props, httpProp: http?.name ?? null, auth };
  }

  async create(userId: string, input: SourceInput): Promise<SourceRecord> {
    // A cheap early refusal at the sources limit, before a component is made or hooks run;
    // store.create checks again atomically.
    await this.store.checkRoom(userId);
    const component = await this.components.select(userId, input);
    if (!component) throw new ValidationError("one of component_id, component_code or component_url is required");
    const name = parseName(input.name, component, this.opts.slugify);
    const hasHttp = component.configurable_props.some((p) => p.type === "$.interface.http");
    const token = hasHttp ? this.store.newEndpointToken() : null;
    const { props, httpProp, auth } = this.configure(component, input.configured_props, token, null);
    const nowMs = this.opts.now();
    const id = newId("dc_", this.opts.randomBytes);
    const draft: SourceRecord = {
      id,
      user_id: userId,
      component_id: component.id,
      configured_props: props,
      active: true,
      created_at: epochSeconds(nowMs),
      updated_at: epochSeconds(nowMs),
      name,
      name_slug: "",
      endpoint_token: token,
      http_prop: httpProp,
      http_auth: auth,
    };
    const prepared = await this.lifecycle.prepare("create", draft, component);
    const record: SourceRecord = { ...draft, name_slug: await this.store.claimSlug(userId, id, name) };
    try {
      // Auto-subscriptions turn into real subscriptions before the source exists, so it never emits
      // without them; the subscription limits apply to them like to any other.
      await this.subscriptions.applyAuto(userId, id);
      await this.store.create(record, nowMs);
    } catch (err) {
      // Refused (a limit) or failed: nothing of this source stays behind.
      await this.subscriptions.deleteNaming(userId, id);
      await this.store.releaseSlug(userId, record.name_slug, id);
      throw err;
    }
    await this.lifecycle.committed(prepared, record);
    return record;
  }

  /** PUT follows the document: component selection and name default as POST; active defaults to true. */
  async update(userId: string, id: unknown, input: SourceInput): Promise<SourceRecord> {
    const prev = await this.get(userId, id);
    const component = await this.components.select(userId, input);
    if (!component) throw new ValidationError("one of component_id, component_code or component_url is required");
    const name = parseName(input.name, component, this.opts.slugify);
    const active = parseActive(input.active);
    const hasHttp = component.configurable_props.some((p) => p.type === "$.interface.http");
    const token = hasHttp ? (prev.endpoint_token ?? this.store.newEndpointToken()) : null;
    // Absent configured_props keep the source's values when the component is unchanged (decision
    // recorded in docs/decisions.md): re-sending every prop just to toggle `active` would be hostile.
    // That includes the HTTP endpoint's auth: storedInput shows it without its secret, which keeps it.
    const rawProps = input.configured_props ?? (component.id === prev.component_id ? storedInput(prev, component) : undefined);
    const { props, httpProp, auth } = this.configure(component, rawProps, token, prev.http_auth ?? null);
    const draft: SourceRecord = {
      ...prev,
      component_id: component.id,
      configured_props: props,
      active,
      name,
      endpoint_token: token,
      http_prop: httpProp,
      http_auth: auth,
      updated_at: epochSeconds(this.opts.now()),
    };
    const prepared = await this.lifecycle.prepare("update", draft, component, prev);
    const slug = name === prev.name ? prev.name_slug : await this.store.claimSlug(userId, prev.id, name, prev.name_slug);
    const record: SourceRecord = { ...draft, name_slug: slug };
    await this.store.save(record, 0);
    if (slug !== prev.name_slug) await this.store.releaseSlug(userId, prev.name_slug, prev.id);
    if (prev.endpoint_token && prev.endpoint_token !== token) await this.store.deleteEndpoint(prev.endpoint_token);
    await this.lifecycle.committed(prepared, record, prev);
    return record;
  }

  async delete(userId: string, id: unknown): Promise<void> {
    const source = await this.get(userId, id);
    await this.lifecycle.removing(source);
    await this.store.delete(source);
    await this.subscriptions.deleteNaming(userId, source.id);
    await this.lifecycle.removed(source);
  }
}

/**
 * Stored props turned back into request form (timers back to {intervalSeconds}/{cron}). The HTTP
 * prop stays as shown, `{endpoint_url, auth}` without the secret: its URL is ignored and its auth,
 * being the source's own as shown, keeps the stored one (domain/inbound-auth.ts).
 */
function storedInput(prev: SourceRecord, component: ComponentRecord): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const def of component.configurable_props) {
    if (!(def.name in prev.configured_props)) continue;
    const v = prev.configured_props[def.name];
    if (def.type === "$.interface.timer" && v && typeof v === "object") {
      const t = v as { cron?: string | null; interval_seconds?: number | null };
      out[def.name] = t.cron ? { cron: t.cron } : { intervalSeconds: t.interval_seconds };
      continue;
    }
    out[def.name] = v;
  }
  return out;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
