/** Errors of the state and lock layer. */

/** Another run holds the lock (exit code 5). */
export class LockHeldError extends Error {
  override name = 'LockHeldError';
}

/** The stored state changed under us (a stale writer loses): abort without deletions. */
export class StateConflictError extends Error {
  override name = 'StateConflictError';
}

/** The stored state cannot be read or parsed: a clear error, no deletions. */
export class StateCorruptError extends Error {
  override name = 'StateCorruptError';
}

/** The store cannot hold the state (never truncated silently). */
export class StateTooLargeError extends Error {
  override name = 'StateTooLargeError';
}

/** The command that resets a function's state in this very store (the `--state` it was read with). */
export function resetCommand(fn: string, store: string): string {
  return `twopass state reset ${fn} --state ${store}`;
}
