import type { ComponentRecord } from "../store/components.js";

/**
 * What the runtime needs from the component catalogue (the user's own components and the
 * registry): a record by id and its compiled code. `services/components.ts` implements it; the
 * runtime never imports services (docs/architecture.md, "The map of the code").
 */
export interface ComponentCatalog {
  /** The component, or NotFoundError. */
  require(userId: string, id: string): Promise<ComponentRecord>;
  /** The compiled code a run takes, or NotFoundError. */
  compiled(userId: string, component: Pick<ComponentRecord, "id">): Promise<string>;
}
