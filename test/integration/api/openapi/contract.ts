import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { expect } from "vitest";
import type { Reply } from "../../../helpers/daemon.js";
import type { Json } from "../support.js";

/**
 * Checks real answers against the OpenAPI document the daemon serves: the status must be one the
 * operation documents, and the body must validate (ajv, JSON Schema 2020-12 as OpenAPI 3.1 uses)
 * against that response's schema.
 */

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;
const DOC_ID = "https://tributary.test/openapi.json";

/** A document's `paths` and `responses` lookups plus compiled validators. */
export class Contract {
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<string, ValidateFunction>();
  /** "METHOD /path" of every operation checked so far. */
  readonly seen = new Set<string>();

  constructor(readonly doc: Json) {
    this.ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(this.ajv);
    // Refs in the document (`#/components/schemas/X`) point into this one resource.
    this.ajv.addSchema({ $id: DOC_ID, components: { schemas: doc.components.schemas } });
  }

  /** The schema with its local refs pointed at the document resource. */
  private validator(key: string, schema: Json): ValidateFunction {
    let v = this.compiled.get(key);
    if (!v) {
      const absolute = JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', `"${DOC_ID}#/components/`));
      v = this.ajv.compile(absolute);
      this.compiled.set(key, v);
    }
    return v;
  }

  private response(ref: Json): Json {
    const name = typeof ref.$ref === "string" ? ref.$ref.replace("#/components/responses/", "") : undefined;
    return name ? this.doc.components.responses[name] : ref;
  }

  /** Validation errors of `body` against a named component schema (empty when it validates). */
  errorsFor(schemaName: string, body: unknown): string[] {
    const v = this.validator(`schema ${schemaName}`, { $ref: `#/components/schemas/${schemaName}` });
    return v(body) ? [] : (v.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
  }

  /** Problems of a reply to `method template` (empty when it matches the document). */
  problems(method: string, template: string, res: Reply): string[] {
    const op = this.doc.paths[template]?.[method.toLowerCase()];
    if (!op) return [`the document has no ${method} ${template}`];
    this.seen.add(`${method} ${template}`);
    const documented = op.responses[String(res.status)];
    if (!documented) return [`${method} ${template} answered ${res.status}, documented: ${Object.keys(op.responses).join(", ")}`];
    const response = this.response(documented);
    const json = response.content?.["application/json"];
    if (!json) {
      const types = Object.keys(response.content ?? {});
      if (types.length === 0 && res.text !== "") return [`${res.status} documented without a body, got ${res.text.slice(0, 80)}`];
      const type = res.headers.get("content-type") ?? "";
      if (types.length > 0 && !types.some((t) => t === "*/*" || type.startsWith(t))) return [`content-type ${type}, documented ${types}`];
      return [];
    }
    if (!(res.headers.get("content-type") ?? "").startsWith("application/json")) return [`content-type ${res.headers.get("content-type")}`];
    if (!json.schema) return [];
    const v = this.validator(`${method} ${template} ${res.status}`, json.schema);
    if (v(res.body)) return [];
    return (v.errors ?? []).map((e) => `${res.status} ${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
  }

  /** Asserts that the reply matches the document. */
  expectMatches(method: string, template: string, res: Reply): void {
    expect(this.problems(method, template, res), `${method} ${template} -> ${res.status} ${res.text.slice(0, 300)}`).toEqual([]);
  }
}

/** `/v1/sources/{id}` with `{id: "dc_x"}` -> `/v1/sources/dc_x`. */
export function fill(template: string, params: Record<string, string>): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => {
    const v = params[name];
    if (v === undefined) throw new Error(`no value for {${name}} in ${template}`);
    return encodeURIComponent(v).replace(/%24/g, "$");
  });
}
