/**
 * The in-process side of a store's change messages: listeners called with each message once the
 * change is committed, before the change's caller resumes. Other processes get the same message
 * from the Redis channel the store publishes on in the change's transaction.
 */
export class LocalChanges {
  private readonly listeners = new Set<(message: string) => void>();

  listen(listener: (message: string) => void): void {
    this.listeners.add(listener);
  }

  emit(message: string): void {
    for (const listener of this.listeners) listener(message);
  }
}
