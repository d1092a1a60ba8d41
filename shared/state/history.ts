/**
 * The history of runs: what each of a function's last runs did (new, pending, rescued,
 * reset, indeterminate, confirmed, deleted, and why), kept beside its state so that it
 * outlives the Job's pod and its logs. `twopass history` reads it; `explain` points into it.
 *
 * Bounded: the last `runs` records, each list holding at most `items` entries (its full
 * count is kept beside), the whole under `bytes` gzipped (the oldest records go first).
 * On disk: `<dir>/<fn>.history.json.gz`, rewritten whole (temp file, fsync, rename). In a
 * cluster: the ConfigMap `twopass-<fn>-history`, replaced with its resourceVersion.
 *
 * Never a reason not to delete: the record is written after the run's deletions; one that
 * cannot be written is a logged side failure of the run (its diff log still says it all).
 */
import { randomUUID } from 'node:crypto';
import { copyFile, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { z } from 'zod';
import { formatDuration } from '../engine/duration.ts';
import type { DiffEvent } from '../engine/types.ts';
import { ConflictError } from '../kube/errors.ts';
import type { KubeClient } from '../kube/ports.ts';
import { CONFIGMAPS, type KubeObject } from '../kube/resources.ts';
import { ensureDir, writeSynced } from '../paths.ts';

/** The lists of a run record, in the order a reader meets them. */
export const HISTORY_LISTS = [
  'new',
  'pending',
  'rescued',
  'reset',
  'indeterminate',
  'confirmed',
  'deleted',
  'alreadyGone',
  'held',
  'skipped',
  'failed',
] as const;
export type HistoryList = (typeof HISTORY_LISTS)[number];

const itemSchema = z.object({
  key: z.string(),
  kind: z.string().optional(),
  name: z.string().optional(),
  why: z.string().optional(),
});
export type HistoryItem = z.infer<typeof itemSchema>;

/** `n` is how many there were; `items` the first of them (at most the retention's `items`). */
const listSchema = z.object({ n: z.number().int().nonnegative(), items: z.array(itemSchema) });

export const runRecordSchema = z.object({
  runId: z.string().min(1),
  snapshotId: z.string().optional(),
  function: z.string().min(1),
  startedAt: z.number().finite(),
  durationMs: z.number().finite(),
  dryRun: z.boolean(),
  outcome: z.string(),
  exitCode: z.number().int(),
  error: z.string().optional(),
  /** The diff log's summary counts (absent when no snapshot was decided). */
  summary: z.record(z.string(), z.number()).optional(),
  /** Run-level notices: evidence accepted, run refused or aborted. */
  notices: z.array(z.string()).optional(),
  lists: z.partialRecord(z.enum(HISTORY_LISTS), listSchema),
});
export type RunRecord = z.infer<typeof runRecordSchema>;

const fileSchema = z.object({
  twopassHistory: z.literal(1),
  function: z.string(),
  runs: z.array(z.unknown()),
});

export type HistoryRetention = Readonly<{ runs: number; items: number; bytes: number }>;
export const HISTORY_RETENTION: HistoryRetention = { runs: 50, items: 200, bytes: 700 * 1024 };

export interface HistoryStore {
  readonly description: string;
  /** Adds a run's record, dropping the oldest beyond the retention. Throws when it cannot write. */
  append(fn: string, record: RunRecord, signal?: AbortSignal): Promise<void>;
  /** The kept records, oldest first; a damaged store yields what it can read (`damage` says what not). */
  list(fn: string, signal?: AbortSignal): Promise<RunRecord[]>;
  damage(fn: string): string | undefined;
}

/** What a finished run hands to `recordOf`. */
export type RunFacts = Readonly<{
  function: string;
  runId: string;
  snapshotId?: string | undefined;
  startedAt: number;
  durationMs: number;
  dryRun: boolean;
  outcome: string;
  exitCode: number;
  error?: string | undefined;
  summary?: Readonly<Record<string, number>> | undefined;
  events: readonly DiffEvent[];
  deleted: readonly string[];
  alreadyGone?: readonly string[] | undefined;
  held: readonly string[];
  skipped: readonly string[];
  failed: readonly string[];
}>;

/** A run's record from its diff events and its outcome, each list cut to `items` entries. */
export function recordOf(f: RunFacts, items = HISTORY_RETENTION.items): RunRecord {
  const lists: Partial<Record<HistoryList, { n: number; items: HistoryItem[] }>> = {};
  const add = (list: HistoryList, item: HistoryItem) => {
    const l = lists[list] ?? { n: 0, items: [] };
    l.n++;
    if (l.items.length < items) l.items.push(item);
    lists[list] = l;
  };
  const named = new Map<string, { kind: string; name: string }>();
  const notices: string[] = [];
  for (const e of f.events) {
    if (!('key' in e)) {
      notices.push(`${e.event}: ${e.reason}`);
      continue;
    }
    const base = { key: e.key, kind: e.kind, name: e.name };
    switch (e.event) {
      case 'candidate.new':
        add('new', base);
        break;
      case 'candidate.pending':
        add('pending', {
          ...base,
          why: `seen unused ${e.observations}x, ${formatDuration(e.timeLeftMs)} left (${e.waitingFor})`,
        });
        break;
      case 'candidate.rescued':
        add('rescued', { ...base, why: `in use again after ${formatDuration(e.unusedForMs)} unused` });
        break;
      case 'candidate.reset':
        add('reset', { ...base, why: e.reason });
        break;
      case 'target.indeterminate':
        add('indeterminate', { ...base, why: e.reason });
        break;
      case 'candidate.confirmed':
        named.set(e.key, { kind: e.kind, name: e.name });
        add('confirmed', {
          ...base,
          why: `unused for ${formatDuration(e.unusedForMs)}, seen unused ${e.observations}x`,
        });
        break;
    }
  }
  const keyed = (list: HistoryList, keys: readonly string[] | undefined) => {
    for (const key of keys ?? []) add(list, { key, ...named.get(key) });
  };
  keyed('deleted', f.deleted);
  keyed('alreadyGone', f.alreadyGone);
  keyed('held', f.held);
  keyed('skipped', f.skipped);
  keyed('failed', f.failed);
  return {
    runId: f.runId,
    ...(f.snapshotId ? { snapshotId: f.snapshotId } : {}),
    function: f.function,
    startedAt: f.startedAt,
    durationMs: f.durationMs,
    dryRun: f.dryRun,
    outcome: f.outcome,
    exitCode: f.exitCode,
    ...(f.error ? { error: f.error } : {}),
    ...(f.summary ? { summary: { ...f.summary } } : {}),
    ...(notices.length ? { notices } : {}),
    lists,
  };
}

/** Parses stored records one by one: a record that does not parse is left out and counted. */
function parseRuns(raw: unknown, fn: string, where: string): { runs: RunRecord[]; bad: string | undefined } {
  const file = fileSchema.safeParse(raw);
  if (!file.success) return { runs: [], bad: `${where}: not a history of runs` };
  if (file.data.function !== fn) return { runs: [], bad: `${where}: the history of ${file.data.function}` };
  const runs: RunRecord[] = [];
  let lost = 0;
  for (const r of file.data.runs) {
    const p = runRecordSchema.safeParse(r);
    if (p.success) runs.push(p.data);
    else lost++;
  }
  return { runs, bad: lost ? `${where}: ${lost} unreadable run record(s) left out` : undefined };
}

/** The newest records that fit the retention, gzipped. */
export function encodeHistory(fn: string, runs: readonly RunRecord[], r: HistoryRetention): Buffer {
  let kept = runs.slice(Math.max(0, runs.length - r.runs));
  for (;;) {
    const gz = gzipSync(Buffer.from(JSON.stringify({ twopassHistory: 1, function: fn, runs: kept })));
    if (gz.length <= r.bytes || kept.length <= 1) {
      if (gz.length > r.bytes)
        throw new Error(`one run's record is ${gz.length} bytes gzipped, above ${r.bytes}`);
      return gz;
    }
    // drop the oldest quarter (at least one) and try again
    kept = kept.slice(Math.max(1, Math.floor(kept.length / 4)));
  }
}

function decodeHistory(
  gz: Buffer,
  fn: string,
  where: string,
): { runs: RunRecord[]; bad: string | undefined } {
  let raw: unknown;
  try {
    raw = JSON.parse(gunzipSync(gz).toString('utf8'));
  } catch (err) {
    return { runs: [], bad: `${where}: not gzipped JSON (${(err as Error).message})` };
  }
  return parseRuns(raw, fn, where);
}

/** In memory (tests, the simulator). */
export class MemoryHistory implements HistoryStore {
  readonly description = 'memory';
  readonly kept = new Map<string, RunRecord[]>();
  /** Makes the next appends fail (a test that a history not written never stops a deletion). */
  failing: string | undefined;
  private readonly retention: HistoryRetention;
  constructor(retention: HistoryRetention = HISTORY_RETENTION) {
    this.retention = retention;
  }
  async append(fn: string, record: RunRecord): Promise<void> {
    if (this.failing) throw new Error(this.failing);
    const runs = [...(this.kept.get(fn) ?? []), record];
    this.kept.set(fn, runs.slice(Math.max(0, runs.length - this.retention.runs)));
  }
  async list(fn: string): Promise<RunRecord[]> {
    return [...(this.kept.get(fn) ?? [])];
  }
  damage(): string | undefined {
    return undefined;
  }
}

/** `<dir>/<fn>.history.json.gz`, rewritten whole on each append. */
export class FileHistory implements HistoryStore {
  readonly description: string;
  private readonly dir: string;
  private readonly retention: HistoryRetention;
  private readonly damaged = new Map<string, string>();
  constructor(dir: string, retention: HistoryRetention = HISTORY_RETENTION) {
    this.dir = dir;
    this.description = `file:${dir}`;
    this.retention = retention;
  }
  path(fn: string): string {
    return join(this.dir, `${fn}.history.json.gz`);
  }
  async list(fn: string): Promise<RunRecord[]> {
    this.damaged.delete(fn);
    let gz: Buffer;
    try {
      gz = await readFile(this.path(fn));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const { runs, bad } = decodeHistory(gz, fn, this.path(fn));
    if (bad) this.damaged.set(fn, bad);
    return runs;
  }
  damage(fn: string): string | undefined {
    return this.damaged.get(fn);
  }
  async append(fn: string, record: RunRecord): Promise<void> {
    ensureDir(this.dir);
    const runs = await this.list(fn);
    // a damaged file is kept beside the new one: what it holds is never thrown away unread
    if (this.damaged.has(fn)) await copyFile(this.path(fn), `${this.path(fn)}.damaged-${record.startedAt}`);
    const gz = encodeHistory(fn, [...runs, record], this.retention);
    const tmp = `${this.path(fn)}.${randomUUID()}.tmp`;
    await writeSynced(tmp, gz);
    await rename(tmp, this.path(fn));
    this.damaged.delete(fn);
  }
}

const KEY = 'history.json.gz';
type Cm = KubeObject & { binaryData?: Record<string, string> };

/** The ConfigMap of a function's history (for RBAC resourceNames). */
export function historyConfigMapName(fn: string): string {
  return `twopass-${fn}-history`;
}

/** The ConfigMap `twopass-<fn>-history`: replaced with its resourceVersion; a conflict is read again once. */
export class ConfigMapHistory implements HistoryStore {
  readonly description: string;
  private readonly kube: KubeClient;
  private readonly namespace: string;
  private readonly retention: HistoryRetention;
  private readonly damaged = new Map<string, string>();
  constructor(kube: KubeClient, namespace: string, retention: HistoryRetention = HISTORY_RETENTION) {
    this.kube = kube;
    this.namespace = namespace;
    this.description = `configmap:${namespace}`;
    this.retention = retention;
  }
  private async read(fn: string, signal?: AbortSignal): Promise<{ runs: RunRecord[]; cm: Cm | undefined }> {
    this.damaged.delete(fn);
    const cm = (await this.kube.get(CONFIGMAPS, this.namespace, historyConfigMapName(fn), signal)) as
      | Cm
      | undefined;
    if (!cm) return { runs: [], cm };
    const where = `ConfigMap ${this.namespace}/${historyConfigMapName(fn)}`;
    const b64 = cm.binaryData?.[KEY];
    const { runs, bad } =
      typeof b64 === 'string'
        ? decodeHistory(Buffer.from(b64, 'base64'), fn, where)
        : { runs: [], bad: `${where}: binaryData.${KEY} is missing` };
    if (bad) this.damaged.set(fn, bad);
    return { runs, cm };
  }
  async list(fn: string, signal?: AbortSignal): Promise<RunRecord[]> {
    return (await this.read(fn, signal)).runs;
  }
  damage(fn: string): string | undefined {
    return this.damaged.get(fn);
  }
  async append(fn: string, record: RunRecord, signal?: AbortSignal): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const { runs, cm } = await this.read(fn, signal);
      const body = {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: {
          name: historyConfigMapName(fn),
          namespace: this.namespace,
          labels: {
            'app.kubernetes.io/name': 'twopass',
            'twopass.io/function': fn,
            'twopass.io/history': 'true',
          },
          ...(cm?.metadata.resourceVersion ? { resourceVersion: cm.metadata.resourceVersion } : {}),
        },
        binaryData: {
          [KEY]: encodeHistory(fn, [...runs, record], this.retention).toString('base64'),
        },
      } as unknown as Cm;
      try {
        if (cm) await this.kube.replace(CONFIGMAPS, body, signal);
        else await this.kube.create(CONFIGMAPS, body, signal);
        return;
      } catch (err) {
        // another writer (a run by hand beside the CronJob's, each under the lock only while
        // it ran): read what it wrote and add this record to it, once
        if (err instanceof ConflictError && attempt === 0) continue;
        throw err;
      }
    }
  }
}

/** Where a key shows up in the history: the first run it was new in, and the runs that confirmed and deleted it. */
export type KeyTrail = Readonly<{
  firstUnused?: { runId: string; at: number };
  confirmed?: { runId: string; at: number };
  deleted?: { runId: string; at: number };
  rescued?: { runId: string; at: number; why?: string | undefined };
}>;

export function trailOf(runs: readonly RunRecord[], key: string): KeyTrail {
  const out: {
    firstUnused?: { runId: string; at: number };
    confirmed?: { runId: string; at: number };
    deleted?: { runId: string; at: number };
    rescued?: { runId: string; at: number; why?: string | undefined };
  } = {};
  const has = (r: RunRecord, l: HistoryList) => r.lists[l]?.items.find((i) => i.key === key);
  for (const r of runs) {
    const at = { runId: r.runId, at: r.startedAt };
    // a key new again after a rescue or a deletion starts a new trail
    if (has(r, 'new')) {
      out.firstUnused = at;
      delete out.confirmed;
      delete out.deleted;
      delete out.rescued;
    }
    const rescued = has(r, 'rescued');
    if (rescued) out.rescued = { ...at, why: rescued.why };
    if (has(r, 'confirmed')) out.confirmed = at;
    if (has(r, 'deleted')) out.deleted = at;
  }
  return out;
}
