/** What a run is given: the function, its ports, the state, the clock, the log and the hooks. */
import type { EventNote, TwopassFunction } from '../contract/index.ts';
import type { Snapshot } from '../engine/types.ts';
import type { Logger } from '../log/logger.ts';
import type { Lock, StateStore } from '../state/store.ts';
import type { Time } from '../time.ts';
import type { LogSink, RunHooks } from './result.ts';

export type RunDeps<R, W> = Readonly<{
  fn: TwopassFunction<R, W>;
  reader: R;
  writer: W;
  store: StateStore;
  lock: Lock;
  time: Time;
  log: Logger;
  newId: () => string;
  /** Persists the snapshot (--save-snapshot); returns where. */
  saveSnapshot?: (snapshot: Snapshot) => Promise<string>;
  /** Told of every outcome, for metrics and Kubernetes Events. */
  hooks?: RunHooks;
  /** Records the Kubernetes Event of a deletion (absent: no Events). */
  recordEvent?: (note: EventNote, signal: AbortSignal) => Promise<void>;
  /** Where the diff log goes, when it can be lost (a closed pipe): a run without its log does not delete. */
  logSink?: LogSink;
}>;
