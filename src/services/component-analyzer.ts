import type { ComponentMeta } from "../domain/component-meta.js";

export type { ComponentMeta };

/** The seam between the management API and the sandbox. */
export interface ComponentAnalyzer {
  /** Compiles and inspects code; throws ValidationError (400) when it is not a component. */
  analyze(code: string): Promise<{ meta: ComponentMeta; compiled: string }>;
}

/** Fetches code from a component_url; throws ValidationError naming component_url on failure. */
export interface ComponentFetcher {
  fetch(url: string): Promise<string>;
}
