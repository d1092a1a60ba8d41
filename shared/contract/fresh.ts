/**
 * Fresh evidence for the act phase, shared by its batches and bounded in age (law 6).
 *
 * A re-check must judge a target on evidence read after the decision, and a deleting run
 * after a lost node re-checks hundreds of targets: one read of the cluster per target would
 * cost orphans x cluster size. So the batches of one run share one read of the evidence
 * they need (a key names it: "the DanmEps, pods and networks", "rule X's lists"), and read
 * it again once it is older than the bound. Age counts from the moment the read started,
 * the conservative end. Two batches that ask at once share one read in flight; a read that
 * fails is forgotten, never served.
 */
import { ListIncompleteError } from '../errors.ts';

/** One read of the evidence: its value, when the read started, and which read of the run it was. */
export type FreshRead<T> = Readonly<{ value: T; readAt: number; generation: number }>;

export type FreshOptions = Readonly<{
  /** Re-read unless the cached read is newer than this one (after a conflict proved it stale). */
  newerThan?: FreshRead<unknown>;
}>;

/** What a function calls to get evidence at most `maxAgeMs` old (the run's `evidenceMaxAge`). */
export type FreshEvidence = <T>(
  key: string,
  read: () => Promise<T>,
  opts?: FreshOptions,
) => Promise<FreshRead<T>>;

/** Default bound on the age of the evidence a deletion is re-checked against. */
export const EVIDENCE_MAX_AGE_MS = 30_000;

type Entry = { promise: Promise<FreshRead<unknown>>; readAt: number; generation: number };

/** The per-run cache behind `FreshEvidence`; counts its reads for the run's summary. */
export class EvidenceCache {
  private readonly entries = new Map<string, Entry>();
  private generation = 0;
  /** Reads started, per key. */
  readonly reads = new Map<string, number>();

  private readonly now: () => number;
  readonly maxAgeMs: number;

  constructor(now: () => number, maxAgeMs: number) {
    this.now = now;
    this.maxAgeMs = maxAgeMs;
  }

  readonly get: FreshEvidence = <T>(key: string, read: () => Promise<T>, opts: FreshOptions = {}) => {
    const had = this.entries.get(key);
    const now = this.now();
    const young = had !== undefined && now - had.readAt <= this.maxAgeMs;
    const newer =
      had !== undefined && (opts.newerThan === undefined || had.generation > opts.newerThan.generation);
    if (had && young && newer) return had.promise as Promise<FreshRead<T>>;
    const generation = ++this.generation;
    const readAt = now;
    this.reads.set(key, (this.reads.get(key) ?? 0) + 1);
    const promise = read().then((value) => ({ value, readAt, generation }));
    const entry: Entry = { promise, readAt, generation };
    this.entries.set(key, entry);
    promise.catch(() => {
      if (this.entries.get(key) === entry) this.entries.delete(key);
    });
    return promise;
  };

  /** Reads in total (for the run's log). */
  total(): number {
    let n = 0;
    for (const v of this.reads.values()) n += v;
    return n;
  }
}

/**
 * Evidence through the run's cache when there is one; a context without one (a read-only
 * command, a unit test) reads every time, which is always fresh.
 */
export function freshEvidence<T>(
  ctx: Readonly<{ fresh?: FreshEvidence | undefined }>,
  key: string,
  read: () => Promise<T>,
  opts?: FreshOptions,
): Promise<FreshRead<T>> {
  if (ctx.fresh) return ctx.fresh(key, read, opts);
  return read().then((value) => ({ value, readAt: Number.NaN, generation: 0 }));
}

/**
 * Holds a fresh evidence list to the snapshot that decided (the act phase's
 * `evidenceFloor`): a count that dropped more than the evidence guard allows is not read
 * as absence; the batch that read it deletes nothing.
 */
export function checkFreshCount(
  ctx: Readonly<{ evidenceFloor?: ((source: string, count: number) => string | undefined) | undefined }>,
  source: string,
  count: number,
): void {
  const why = ctx.evidenceFloor?.(source, count);
  if (why !== undefined) throw new ListIncompleteError(`fresh ${source}`, why);
}
