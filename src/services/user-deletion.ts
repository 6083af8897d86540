import { NotFoundError } from "../domain/errors.js";
import type { Logger } from "../observability/logger.js";
import type { SourceStore } from "../store/sources.js";
import type { UserStore } from "../store/users.js";
import type { SourceService } from "./sources.js";

/**
 * Deleting a user (SPEC §4), the one way both the admin API and the CLI do it: each source is
 * deleted as DELETE /sources/{id} would (deactivate hook, timer scheduler removed, subscriptions
 * naming it dropped), then the user's key is revoked and every key under their hash tag removed.
 * A source that fails to go is logged and the deletion carries on: the user's keys go anyway, and
 * the scheduler drops a timer whose source no longer exists.
 */
export class UserDeletion {
  constructor(
    private readonly users: UserStore,
    private readonly sourceStore: SourceStore,
    private readonly sources: Pick<SourceService, "delete">,
    private readonly logger: Logger,
  ) {}

  /** Throws NotFoundError for an unknown user. */
  async delete(userId: string): Promise<void> {
    await this.users.require(userId);
    for (const id of await this.sourceStore.ids(userId)) {
      await this.sources.delete(userId, id).catch((err: unknown) => {
        // Deleted meanwhile (a concurrent DELETE): nothing left to do for it.
        if (err instanceof NotFoundError) return;
        this.logger.warn({ err, userId, sourceId: id }, "user deletion: source removal failed; deleting the user anyway");
      });
    }
    await this.users.delete(userId);
  }
}
