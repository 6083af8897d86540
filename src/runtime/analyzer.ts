import type { Config } from "../config/schema.js";
import type { ComponentAnalyzer } from "../services/component-analyzer.js";
import { compileComponent } from "./component/compile.js";
import { readComponentMeta } from "./component/meta.js";

/** The management API's view of the sandbox: compile the code, then read its metadata in an isolate. */
export function createAnalyzer(config: Config): ComponentAnalyzer {
  return {
    async analyze(code: string) {
      const compiled = await compileComponent(code, { allowedPackages: config.sandboxAllowedPackages });
      const meta = await readComponentMeta(compiled, { memoryMb: Math.min(config.sandboxMemoryMb, 64), timeoutMs: 1000 });
      return { meta, compiled };
    },
  };
}
