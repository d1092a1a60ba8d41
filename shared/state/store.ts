/** The StateStore and Lock ports. */
import type { State } from '../engine/types.ts';
import type { HistoryStore } from './history.ts';
import type { TombstoneStore } from './tombstones.ts';

export type Loaded = Readonly<{
  state: State /** Opaque version for optimistic concurrency; undefined when nothing is stored. */;
  version?: string;
}>;

export interface StateStore {
  readonly description: string;
  load(fn: string, signal?: AbortSignal): Promise<Loaded>;
  /** Writes when the stored version still equals `version`; throws StateConflictError otherwise. Returns the new version. */
  save(fn: string, state: State, version: string | undefined, signal?: AbortSignal): Promise<string>;
  /** Removes the stored state (observation starts over). Deletes no resource. */
  reset(fn: string, signal?: AbortSignal): Promise<boolean>;
  /** Where the deletions' tombstones are kept, beside the state (none: nothing may be deleted). */
  readonly tombstones?: TombstoneStore;
  /** What the function's last runs did (`twopass history`), beside the state (none: not kept). */
  readonly history?: HistoryStore;
}

export interface LockHandle {
  /** Aborted when the lock is lost (e.g. the Lease could not be renewed). */
  readonly lost: AbortSignal;
  release(): Promise<void>;
}

export interface Lock {
  readonly description: string;
  /** Throws LockHeldError when another holder has it. */
  acquire(fn: string, signal?: AbortSignal): Promise<LockHandle>;
}
