import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { NotFoundError, ValidationError } from "../domain/errors.js";
import { hasIdShape } from "../domain/ids.js";
import { isHttpUrl } from "../domain/url-rules.js";
import type { ComponentRecord, ComponentStore, NewComponent } from "../store/components.js";
import type { ComponentAnalyzer, ComponentFetcher, ComponentMeta } from "./component-analyzer.js";

export const sha256Hex = (s: string): string => createHash("sha256").update(s).digest("hex");

/** The fields of a component as the API shows them. */
export function componentView(c: ComponentRecord) {
  return {
    id: c.id,
    key: c.key,
    code: c.code,
    code_hash: c.code_hash,
    name: c.name,
    version: c.version,
    description: c.description,
    configurable_props: c.configurable_props,
    component_url: c.component_url,
    created_at: c.created_at,
    updated_at: c.updated_at,
  };
}

/** The stored fields of a component, from its code and what the sandbox read from it. */
function componentFields(code: string, codeHash: string, meta: ComponentMeta, url: string | null): NewComponent {
  return {
    key: meta.key,
    code,
    code_hash: codeHash,
    name: meta.name,
    version: meta.version,
    description: meta.description,
    configurable_props: meta.props,
    dedupe: meta.dedupe,
    hooks: meta.hooks,
    component_url: url,
  };
}

export interface ComponentSelection {
  component_id?: unknown;
  component_code?: unknown;
  component_url?: unknown;
}

function optionalString(value: unknown, name: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw new ValidationError(`${name} must be a string`);
  return value === "" ? undefined : value;
}

/** Components: created from code or a URL, deduplicated by code hash, and the shipped registry. */
export class ComponentService {
  private registry?: Promise<Map<string, { record: ComponentRecord; compiled: string }>>;

  constructor(
    private readonly store: ComponentStore,
    private readonly analyzer: ComponentAnalyzer,
    private readonly fetcher: ComponentFetcher,
    private readonly registryDir: string,
  ) {}

  /** POST /components: component_code wins; component_url is then kept as metadata only. */
  async create(userId: string, sel: ComponentSelection): Promise<ComponentRecord> {
    const code = optionalString(sel.component_code, "component_code");
    const url = optionalString(sel.component_url, "component_url");
    if (code === undefined && url === undefined) throw new ValidationError("component_code or component_url is required");
    if (url !== undefined && (url.length > 2048 || !isHttpUrl(url))) throw new ValidationError("component_url must be an http(s) URL");
    return this.fromCode(userId, code ?? (await this.fetcher.fetch(url as string)), url ?? null);
  }

  /**
   * The component a source request selects: component_id wins over component_code, which wins over
   * component_url. Returns undefined when none of the three is given.
   */
  async select(userId: string, sel: ComponentSelection): Promise<ComponentRecord | undefined> {
    const id = optionalString(sel.component_id, "component_id");
    if (id !== undefined) {
      if (!hasIdShape(id, "sc_")) throw new ValidationError("component_id must be a component id (sc_...)");
      return this.require(userId, id);
    }
    const code = optionalString(sel.component_code, "component_code");
    const url = optionalString(sel.component_url, "component_url");
    if (code === undefined && url === undefined) return undefined;
    return this.create(userId, { component_code: code, component_url: url });
  }

  private async fromCode(userId: string, code: string, url: string | null): Promise<ComponentRecord> {
    if (code.trim() === "") throw new ValidationError("component_code must not be empty");
    const codeHash = sha256Hex(code);
    const existing = await this.store.getByHash(userId, codeHash);
    if (existing) return existing;
    // Refused before the sandbox analyses the code when the user is out of room; the save checks
    // again atomically.
    await this.store.checkRoom(userId, Buffer.byteLength(code));
    const { meta, compiled } = await this.analyzer.analyze(code);
    return this.store.saveOrGet(userId, componentFields(code, codeHash, meta, url), compiled);
  }

  /** A component of the user by id (or a registry component by its id); 404 otherwise. */
  async require(userId: string, id: string): Promise<ComponentRecord> {
    const own = await this.store.get(userId, id);
    if (own) return own;
    for (const entry of (await this.loadRegistry()).values()) if (entry.record.id === id) return entry.record;
    throw new NotFoundError(`component ${id} not found`);
  }

  /** The sandbox-ready code of a component the user can use. */
  async compiled(userId: string, component: Pick<ComponentRecord, "id">): Promise<string> {
    const own = await this.store.compiled(userId, component.id);
    if (own) return own;
    for (const entry of (await this.loadRegistry()).values()) if (entry.record.id === component.id) return entry.compiled;
    throw new NotFoundError(`component ${component.id} not found`);
  }

  /** GET /components/{key|id}: an sc_ id, else the newest of the user's components with that key. */
  async getByKeyOrId(userId: string, keyOrId: string): Promise<ComponentRecord> {
    if (hasIdShape(keyOrId, "sc_")) {
      const byId = await this.store.get(userId, keyOrId);
      if (byId) return byId;
    }
    const byKey = keyOrId.length <= 200 ? await this.store.getByKey(userId, keyOrId) : undefined;
    if (!byKey) throw new NotFoundError(`component ${keyOrId.slice(0, 100)} not found`);
    return byKey;
  }

  async getRegistry(key: string): Promise<ComponentRecord> {
    const entry = (await this.loadRegistry()).get(key);
    if (!entry) throw new NotFoundError(`no registry component with key ${key.slice(0, 100)}`);
    return entry.record;
  }

  /** Reads the registry folder once; every file must be a valid component (a broken one is a bug). */
  private loadRegistry(): Promise<Map<string, { record: ComponentRecord; compiled: string }>> {
    this.registry ??= (async () => {
      const map = new Map<string, { record: ComponentRecord; compiled: string }>();
      const files = (await readdir(this.registryDir).catch(() => [] as string[])).filter((f) => /\.(c|m)?js$/.test(f)).sort();
      for (const file of files) {
        const code = await readFile(path.join(this.registryDir, file), "utf8");
        const { meta, compiled } = await this.analyzer.analyze(code);
        const key = meta.key ?? path.basename(file).replace(/\.(c|m)?js$/, "");
        const hash = sha256Hex(code);
        const record: ComponentRecord = {
          ...componentFields(code, hash, meta, null),
          key,
          // Registry ids are derived from the code, so they are stable across restarts and hosts.
          id: `sc_reg${hash.slice(0, 20)}`,
          user_id: "",
          created_at: 0,
          updated_at: 0,
        };
        map.set(key, { record, compiled });
      }
      return map;
    })();
    return this.registry;
  }
}
