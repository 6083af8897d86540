import { ValidationError } from "../../domain/errors.js";
import { normalizeProps } from "../../domain/props.js";
import { ProcessSandbox, type SandboxCrash } from "../sandbox/process-sandbox.js";
import type { SandboxService } from "../sandbox/types.js";
import type { ComponentMeta, Dedupe } from "../../domain/component-meta.js";

export type { ComponentMeta, Dedupe };

/**
 * Reads a component's metadata by evaluating its code in the sandbox, never in the daemon's realm
 * (SPEC §2 "Components"). Code that does not load into a component object is a ValidationError
 * (400) with the reason.
 */

export const DEFAULT_VERSION = "0.0.1";
/** Loading a component is module top-level code only; a second is plenty. */
export const DEFAULT_META_TIMEOUT_MS = 1000;

export interface MetaLimits {
  /** The sandbox the code is loaded in (see createMetaSandbox); its owner closes it. */
  sandbox: SandboxService;
  timeoutMs?: number;
}

export interface LoadOptions extends MetaLimits {
  /** Turns source into the sandbox's script (a ComponentCompiler). */
  compiler: { compile(code: string): Promise<string> };
}

export interface LoadedComponent {
  meta: ComponentMeta;
  /** What Sandbox.run takes; deterministic for a given code and allowlist, so it may be cached. */
  compiledCode: string;
}

/** Compiles component source and reads its metadata; the compiled code is kept for runs. */
export async function loadComponent(code: string, opts: LoadOptions): Promise<LoadedComponent> {
  if (typeof code !== "string" || code.trim() === "") throw new ValidationError("component code is empty");
  const compiledCode = await opts.compiler.compile(code);
  return { meta: await readComponentMeta(compiledCode, opts), compiledCode };
}

/** Reads the metadata of compiled code (compileComponent's output) in a fresh sandbox context. */
export async function readComponentMeta(compiledCode: string, limits: MetaLimits): Promise<ComponentMeta> {
  const result = await limits.sandbox.inspect(compiledCode, limits.timeoutMs ?? DEFAULT_META_TIMEOUT_MS);
  if (!result.ok) throw new ValidationError(`invalid component: ${result.reason}`);
  return toMeta(result.component);
}

/** Checks the guest's description (plain data, see guest-component.ts) field by field. */
export function toMeta(raw: unknown): ComponentMeta {
  const c = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const key = optionalString(c.key, "key");
  const name = optionalString(c.name, "name") ?? key;
  if (name === null) throw new ValidationError("invalid component: it needs a name (or a key)");
  const version = typeof c.version === "number" ? String(c.version) : (optionalString(c.version, "version") ?? DEFAULT_VERSION);
  const dedupe = c.dedupe ?? null;
  if (dedupe !== null && dedupe !== "unique" && dedupe !== "greatest" && dedupe !== "last") {
    throw new ValidationError("invalid component: dedupe must be one of unique, greatest, last");
  }
  const hooks = Array.isArray(c.hooks) ? c.hooks.filter((h): h is string => typeof h === "string") : [];
  return {
    key,
    name,
    version,
    description: optionalString(c.description, "description"),
    dedupe,
    props: normalizeProps(c.props),
    hooks,
    hasRun: c.hasRun === true,
  };
}

function optionalString(value: unknown, field: string): string | null {
  if (value === undefined || value === null || value === "") return null;
  if (typeof value !== "string") throw new ValidationError(`invalid component: ${field} must be a string`);
  return value;
}

/**
 * The sandbox metadata is read in. Its owner (the analyzer) keeps it for its own life, so reading
 * metadata reuses warm isolates, and closes it at shutdown.
 */
export function createMetaSandbox(memoryMb: number, onCrash?: (crash: SandboxCrash) => void): SandboxService {
  // The run time limit does not apply to inspect(), which takes its own; any value will do.
  return new ProcessSandbox({ memoryMb, timeoutMs: DEFAULT_META_TIMEOUT_MS }, { maxIdleIsolates: 2, ...(onCrash ? { onCrash } : {}) });
}
