import path from "node:path";
import { type BuildOptions, build, type Message, type OutputFile, stop } from "esbuild";
import { ValidationError } from "../../domain/errors.js";
import { bracketDepth, MAX_NESTING } from "./nesting.js";
import { resolvePolicyPlugin } from "./resolve-plugin.js";

/**
 * Turns component source (CommonJS `module.exports = {...}` or ESM `export default {...}`, with
 * imports of allowed packages) into one CommonJS script for the sandbox. The script expects
 * `module`, `exports` and `require` in scope (the sandbox wraps it in a function providing them);
 * everything it imports is inlined, so its `require` is only ever called for modules we refused,
 * which throw (see resolve-plugin.ts).
 */

export interface CompileOptions {
  /** Packages component code may import; see SANDBOX_ALLOWED_PACKAGES. */
  allowedPackages: readonly string[];
  /** Where allowed packages are resolved from (their node_modules); default the working directory. */
  resolveDir?: string;
}

/** Name the component's own code carries in error messages and stack traces. */
export const COMPONENT_FILENAME = "component.js";

/**
 * The two calls of esbuild's API the compiler uses. esbuild keeps one service process per Node
 * process; `stop` ends it, and the next `build` starts a new one. A test may stand in a service
 * that fails on purpose.
 */
export interface EsbuildService {
  build(options: BuildOptions & { write: false }): Promise<{ outputFiles: OutputFile[] }>;
  stop(): Promise<void>;
}

export const esbuildService: EsbuildService = { build: (options) => build(options), stop };

/**
 * True for the rejection of a build whose esbuild service process ended (it crashed, e.g. on a
 * stack overflow, or was stopped): "The service was stopped" for builds in flight, "The service is
 * no longer running" for every later one, until `stop()` lets the next build start a new service.
 */
export function isServiceStopped(err: unknown): boolean {
  return err instanceof Error && /^The service (was stopped|is no longer running)/.test(err.message);
}

/**
 * One build. Throws ValidationError for code that is not a component; an esbuild service that
 * stopped surfaces as its own error (see isServiceStopped), which ComponentCompiler handles.
 */
export async function compileComponent(code: string, opts: CompileOptions, service: EsbuildService = esbuildService): Promise<string> {
  const depth = bracketDepth(code, MAX_NESTING);
  if (depth > MAX_NESTING) {
    throw new ValidationError(`component_code nests brackets more than ${MAX_NESTING} levels deep`);
  }
  const resolveDir = path.resolve(opts.resolveDir ?? process.cwd());
  try {
    const result = await service.build({
      stdin: { contents: code, sourcefile: COMPONENT_FILENAME, resolveDir, loader: "js" },
      bundle: true,
      format: "cjs",
      platform: "neutral",
      // "neutral" sets no main fields; packages in node_modules mostly declare "main" only.
      mainFields: ["module", "main"],
      conditions: ["import", "require", "default"],
      target: "es2022",
      write: false,
      logLevel: "silent",
      charset: "utf8",
      legalComments: "none",
      plugins: [resolvePolicyPlugin({ allowedPackages: opts.allowedPackages, entryPath: path.join(resolveDir, COMPONENT_FILENAME) })],
    });
    const out = result.outputFiles[0];
    if (!out) throw new ValidationError("component code compiled to nothing");
    return out.text;
  } catch (err) {
    if (err instanceof ValidationError) throw err;
    const errors = (err as { errors?: Message[] }).errors;
    if (Array.isArray(errors) && errors.length > 0) throw new ValidationError(`invalid component code: ${formatMessages(errors)}`);
    throw err;
  }
}

/** `component.js:3:7: Expected ";" but found "is"`, several joined by "; " (at most three). */
function formatMessages(errors: readonly Message[]): string {
  const shown = errors.slice(0, 3).map((e) => {
    const loc = e.location;
    // Locations inside node_modules would reveal the daemon's paths; keep only the component's.
    const where = loc?.file.endsWith(COMPONENT_FILENAME) ? `${COMPONENT_FILENAME}:${loc.line}:${loc.column + 1}: ` : "";
    return where + e.text;
  });
  const more = errors.length > 3 ? `; and ${errors.length - 3} more` : "";
  return shown.join("; ") + more;
}
