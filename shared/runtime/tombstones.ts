/**
 * The act phase's tombstone writer: every deletion's tombstone is durable before the
 * deletion is sent. Units run in parallel; their writes are grouped (one store write
 * carries every entry that arrived while the last one was in flight), so a run that
 * deletes hundreds writes a few times, not hundreds.
 */
import type { TwopassFunction } from '../contract/index.ts';
import type { Target } from '../engine/types.ts';
import { messageOf } from '../errors.ts';
import type { Tombstone, TombstoneEntry, TombstoneStore } from '../state/tombstones.ts';

export type TombstoneRun = Readonly<{ runId: string; snapshotId: string }>;

export class TombstoneWriter {
  private readonly store: TombstoneStore | undefined;
  private readonly fn: TwopassFunction<unknown, unknown>;
  private readonly run: TombstoneRun;
  private readonly now: () => number;
  private readonly targets: ReadonlyMap<string, Target>;
  private readonly signal: AbortSignal;
  private pending: { entries: Tombstone[]; done: PromiseWithResolvers<void> } | undefined;
  private flight: Promise<void> | undefined;
  /** Store writes made (for the act summary). */
  writes = 0;
  written = 0;

  constructor(o: {
    store: TombstoneStore | undefined;
    fn: TwopassFunction<unknown, unknown>;
    run: TombstoneRun;
    now: () => number;
    targets: readonly Target[];
    signal: AbortSignal;
  }) {
    this.store = o.store;
    this.fn = o.fn;
    this.run = o.run;
    this.now = o.now;
    this.targets = new Map(o.targets.map((t) => [t.key, t]));
    this.signal = o.signal;
  }

  /** Durable when it resolves; rejects when the store cannot write them (nothing of them may go). */
  write = (entries: readonly TombstoneEntry[]): Promise<void> => {
    if (!this.store)
      return Promise.reject(new Error('the state store keeps no tombstones: nothing may be deleted'));
    if (entries.length === 0) return Promise.resolve();
    const at = this.now();
    const full = entries.map((e): Tombstone => {
      const t = this.targets.get(e.key);
      return {
        key: e.key,
        kind: e.kind,
        name: e.name,
        object: e.object,
        ...(e.restore !== undefined ? { restore: e.restore } : {}),
        function: this.fn.name,
        runId: this.run.runId,
        snapshotId: this.run.snapshotId,
        fingerprint: t?.fingerprint ?? '',
        reason: this.fn.kindReport[e.kind]?.unused ?? '',
        at,
      };
    });
    if (!this.pending) this.pending = { entries: [], done: Promise.withResolvers<void>() };
    this.pending.entries.push(...full);
    const done = this.pending.done.promise;
    this.pump();
    return done;
  };

  private pump(): void {
    if (this.flight || !this.pending) return;
    const batch = this.pending;
    this.pending = undefined;
    this.flight = (async () => {
      try {
        await this.store!.append(this.fn.name, batch.entries, this.signal);
        this.writes++;
        this.written += batch.entries.length;
        batch.done.resolve();
      } catch (err) {
        batch.done.reject(new Error(`tombstones not written: ${messageOf(err)}`));
      } finally {
        this.flight = undefined;
        this.pump();
      }
    })();
  }
}
