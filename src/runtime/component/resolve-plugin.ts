import { builtinModules } from "node:module";
import type { Plugin } from "esbuild";
import { PLATFORM_PACKAGE, PLATFORM_SHIM_SOURCE } from "./platform-shim.js";

/**
 * The esbuild plugin that decides what component code may import. The rules:
 * - Node built-ins (`fs`, `node:fs`, `child_process`, ...) are never bundled, from anywhere.
 * - Component code may name only packages on the allowlist, and never a relative or absolute path
 *   (a component is one file; a path would read the daemon's disk at bundle time).
 * - Allowed packages may use their own dependencies and files, resolved by esbuild as usual.
 * - `@pipedream/platform` (when allowed) is our own module on top of the sandbox's `fetch`.
 *
 * A refused static `import` fails the build. A refused `require()` or `import()` instead becomes a
 * module that throws when it is loaded: CommonJS code often requires optional modules inside
 * `try`, and a component that only reaches `require("fs")` in a branch should still be accepted,
 * failing at run time (a top-level refusal still fails when its metadata is read).
 */

const VIRTUAL = "tributary-virtual";
const REFUSED = "tributary-refused";
const BUILTINS = new Set(builtinModules);
/**
 * A package name with an optional sub-path, and no `.` or `..` segment: `lodash/../../etc/passwd`
 * names an allowed package but would read a file outside it at bundle time.
 */
const BARE_SPECIFIER = /^(@[a-z0-9~-][a-z0-9._~-]*\/)?[a-z0-9~-][a-z0-9._~-]*(\/(?!\.\.?(\/|$))[A-Za-z0-9._~@+-]+)*$/;

export interface ResolvePolicy {
  allowedPackages: readonly string[];
  /** Absolute path esbuild reports as the importer of the component's own code. */
  entryPath: string;
}

export function resolvePolicyPlugin(policy: ResolvePolicy): Plugin {
  const allowed = new Set(policy.allowedPackages);
  return {
    name: "tributary-resolve-policy",
    setup(build) {
      build.onResolve({ filter: /.*/ }, (args) => {
        if (args.namespace === VIRTUAL || args.namespace === REFUSED) {
          return refuse(args.path, args.kind, "only the platform API may be imported here");
        }
        const fromComponent = args.importer === policy.entryPath;
        if (isBuiltin(args.path)) return refuse(args.path, args.kind, `package ${args.path} is not allowed`);
        if (!fromComponent) return undefined; // inside an allowed package: esbuild resolves as usual
        if (isPath(args.path)) {
          return refuse(args.path, args.kind, `import of ${args.path} is not allowed: a component is a single file`);
        }
        if (!BARE_SPECIFIER.test(args.path)) return refuse(args.path, args.kind, `module name ${args.path} is not allowed`);
        const pkg = packageName(args.path);
        if (!allowed.has(pkg)) return refuse(args.path, args.kind, `package ${pkg} is not allowed`);
        if (pkg === PLATFORM_PACKAGE) {
          if (args.path !== PLATFORM_PACKAGE) return refuse(args.path, args.kind, `module ${args.path} is not available`);
          return { path: PLATFORM_PACKAGE, namespace: VIRTUAL };
        }
        return undefined;
      });
      build.onLoad({ filter: /.*/, namespace: VIRTUAL }, () => ({ contents: PLATFORM_SHIM_SOURCE, loader: "js" }));
      build.onLoad({ filter: /.*/, namespace: REFUSED }, (args) => ({
        contents: `throw new Error(${JSON.stringify(decodeURIComponent(args.path))});`,
        loader: "js",
      }));
    },
  };
}

function refuse(path: string, kind: string, message: string) {
  if (kind === "import-statement" || kind === "entry-point") return { errors: [{ text: message }] };
  // Deferred refusal (see the file comment). The message travels in the path; encoded because
  // esbuild prints virtual paths in comments of the bundle.
  return { path: encodeURIComponent(message), namespace: REFUSED, pluginData: path };
}

function isBuiltin(spec: string): boolean {
  if (spec.startsWith("node:")) return true;
  const first = spec.split("/")[0] ?? spec;
  return BUILTINS.has(spec) || BUILTINS.has(first);
}

function isPath(spec: string): boolean {
  return spec.startsWith(".") || spec.startsWith("/") || /^[A-Za-z]:[\\/]/.test(spec) || spec.includes("\\");
}

/** `lodash/fp` -> `lodash`; `@scope/pkg/sub` -> `@scope/pkg`. */
export function packageName(spec: string): string {
  const parts = spec.split("/");
  return spec.startsWith("@") ? parts.slice(0, 2).join("/") : (parts[0] ?? spec);
}
