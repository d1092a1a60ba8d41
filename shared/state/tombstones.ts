/**
 * Tombstones: what a deletion removed, exactly as it was just before (re-read at the
 * re-check), written durably before the deletion is sent; a deletion whose tombstone
 * cannot be written does not happen. `twopass restore` reads them back.
 *
 * Stored beside the function's state, gzipped JSON, kept by age (`maxAgeMs`) and count
 * (`maxEntries`). In a cluster: a ring of ConfigMaps `twopass-<fn>-tomb-<i>` (each under
 * the API's size limit; the oldest is overwritten when the ring is full). On disk: one file.
 */
import { randomUUID } from 'node:crypto';
import { copyFile, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync, gzipSync, constants as zlibConstants } from 'node:zlib';
import { z } from 'zod';
import { type Tombstone, tombstoneSchema } from '../contract/tombstone.ts';
import { ConflictError } from '../kube/errors.ts';
import type { KubeClient } from '../kube/ports.ts';
import { CONFIGMAPS, type KubeObject } from '../kube/resources.ts';
import { ensureDir, writeSynced } from '../paths.ts';
import { StateCorruptError } from './errors.ts';

export { type Tombstone, type TombstoneEntry, tombstoneSchema } from '../contract/tombstone.ts';

export type TombstoneRetention = Readonly<{ maxAgeMs: number; maxEntries: number }>;
export const TOMBSTONE_RETENTION: TombstoneRetention = { maxAgeMs: 30 * 24 * 3600_000, maxEntries: 4000 };

export interface TombstoneStore {
  /** Durable when it returns; throws when it cannot write (then nothing may be deleted). */
  append(fn: string, entries: readonly Tombstone[], signal?: AbortSignal): Promise<void>;
  /** Every kept tombstone of the function, oldest first. */
  list(fn: string, signal?: AbortSignal): Promise<Tombstone[]>;
  /** What the last read found damaged and left out (a torn last write, a garbled slot), if anything. */
  damage?(fn: string): string | undefined;
}

/**
 * The text of gzip members, tolerant of damage: a torn last member (a crash during an
 * append) yields what it holds; members after a damaged one are found again by their magic
 * bytes. Returns the text and whether anything could not be read.
 */
export function gunzipTolerant(gz: Buffer): { text: string; damaged: boolean } {
  const soft = { finishFlush: zlibConstants.Z_SYNC_FLUSH };
  try {
    const text = gunzipSync(gz, soft).toString('utf8');
    let strict = true;
    try {
      gunzipSync(gz);
    } catch {
      strict = false;
    }
    return { text, damaged: !strict };
  } catch {
    // member by member, from each gzip header on
    const starts: number[] = [];
    for (let i = 0; i + 2 < gz.length; i++)
      if (gz[i] === 0x1f && gz[i + 1] === 0x8b && gz[i + 2] === 8) starts.push(i);
    let text = '';
    for (const [n, at] of starts.entries()) {
      try {
        text += gunzipSync(gz.subarray(at, starts[n + 1] ?? gz.length), soft).toString('utf8');
        if (!text.endsWith('\n')) text += '\n';
      } catch {
        // not a member (magic bytes inside data) or a damaged one
      }
    }
    return { text, damaged: true };
  }
}

export function encodeTombstones(ts: readonly Tombstone[]): Buffer {
  return gzipSync(Buffer.from(JSON.stringify(ts)));
}

export function decodeTombstones(gz: Buffer, where: string): Tombstone[] {
  let raw: unknown;
  try {
    raw = JSON.parse(gunzipSync(gz).toString('utf8'));
  } catch (err) {
    throw new StateCorruptError(`${where}: tombstones are not gzipped JSON: ${(err as Error).message}`);
  }
  const parsed = z.array(tombstoneSchema).safeParse(raw);
  if (!parsed.success)
    throw new StateCorruptError(`${where}: tombstones do not parse: ${parsed.error.message}`);
  return parsed.data;
}

/** Drops what is older than the retention, then the oldest beyond its count. */
export function retain(ts: readonly Tombstone[], now: number, r: TombstoneRetention): Tombstone[] {
  const young = ts.filter((t) => now - t.at <= r.maxAgeMs);
  return young.slice(Math.max(0, young.length - r.maxEntries));
}

/** In memory (tests, the simulator). */
export class MemoryTombstones implements TombstoneStore {
  readonly kept = new Map<string, Tombstone[]>();
  /** Makes the next appends fail (a test of "no tombstone, no deletion"). */
  failing: string | undefined;
  async append(fn: string, entries: readonly Tombstone[]): Promise<void> {
    if (this.failing) throw new Error(this.failing);
    this.kept.set(fn, [...(this.kept.get(fn) ?? []), ...entries]);
  }
  async list(fn: string): Promise<Tombstone[]> {
    return [...(this.kept.get(fn) ?? [])];
  }
}

export const TOMB_SLOTS = 8;
const TOMB_BYTES = 700 * 1024;
const KEY = 'tombstones.json.gz';
const A_SEQ = 'twopass.io/tombstone-seq';

/** The ConfigMaps of a function's tombstone ring (for RBAC resourceNames). */
export function tombstoneConfigMapNames(fn: string): string[] {
  return Array.from({ length: TOMB_SLOTS }, (_, i) => `twopass-${fn}-tomb-${i}`);
}

type Slot = { i: number; seq: number; entries: Tombstone[]; resourceVersion?: string | undefined };
type Cm = KubeObject & { binaryData?: Record<string, string> };

/**
 * The ring of ConfigMaps: an append rewrites the newest slot (with its resourceVersion, so
 * a second writer loses) or, when it would grow past its size or its share of the count,
 * starts the next slot over the oldest.
 */
export class ConfigMapTombstones implements TombstoneStore {
  private readonly kube: KubeClient;
  private readonly namespace: string;
  private readonly retention: TombstoneRetention;
  private readonly now: () => number;
  private readonly bytes: number;
  private readonly newest = new Map<string, Slot>();
  private readonly damaged = new Map<string, string>();
  constructor(
    kube: KubeClient,
    namespace: string,
    now: () => number,
    retention: TombstoneRetention = TOMBSTONE_RETENTION,
    bytes = TOMB_BYTES,
  ) {
    this.kube = kube;
    this.namespace = namespace;
    this.now = now;
    this.retention = retention;
    this.bytes = bytes;
  }

  /**
   * The readable slots; a garbled one is left out and said (`damage`), never a reason to
   * refuse every deletion and every restore. It is the first the ring writes over.
   */
  private async slots(fn: string, signal?: AbortSignal): Promise<Slot[]> {
    const out: Slot[] = [];
    const bad: string[] = [];
    for (const [i, name] of tombstoneConfigMapNames(fn).entries()) {
      const cm = (await this.kube.get(CONFIGMAPS, this.namespace, name, signal)) as Cm | undefined;
      if (!cm) continue;
      const b64 = cm.binaryData?.[KEY];
      const where = `ConfigMap ${this.namespace}/${name}`;
      const seq = Number(cm.metadata.annotations?.[A_SEQ] ?? '0');
      try {
        if (typeof b64 !== 'string') throw new StateCorruptError(`${where}: binaryData.${KEY} is missing`);
        out.push({
          i,
          seq: Number.isFinite(seq) ? seq : 0,
          entries: decodeTombstones(Buffer.from(b64, 'base64'), where),
          resourceVersion: cm.metadata.resourceVersion,
        });
      } catch (err) {
        bad.push((err as Error).message);
      }
    }
    if (bad.length)
      this.damaged.set(fn, `${bad.length} tombstone ConfigMap(s) unreadable, left out: ${bad.join('; ')}`);
    else this.damaged.delete(fn);
    return out.sort((a, b) => a.seq - b.seq);
  }

  damage(fn: string): string | undefined {
    return this.damaged.get(fn);
  }

  async list(fn: string, signal?: AbortSignal): Promise<Tombstone[]> {
    const all = (await this.slots(fn, signal)).flatMap((s) => s.entries);
    return retain(all, this.now(), this.retention);
  }

  async append(fn: string, entries: readonly Tombstone[], signal?: AbortSignal): Promise<void> {
    let slot = this.newest.get(fn);
    if (!slot) {
      const all = await this.slots(fn, signal);
      slot = all.at(-1) ?? { i: TOMB_SLOTS - 1, seq: 0, entries: [] };
    }
    const perSlot = Math.max(1, Math.ceil(this.retention.maxEntries / TOMB_SLOTS));
    const now = this.now();
    let next: Slot = { ...slot, entries: retain([...slot.entries, ...entries], now, this.retention) };
    let gz = encodeTombstones(next.entries);
    if (slot.seq === 0 || gz.length > this.bytes || next.entries.length > perSlot) {
      // the next slot, over the oldest: its old entries go
      const i = (slot.i + 1) % TOMB_SLOTS;
      const old = (await this.kube.get(
        CONFIGMAPS,
        this.namespace,
        tombstoneConfigMapNames(fn)[i]!,
        signal,
      )) as Cm | undefined;
      next = { i, seq: slot.seq + 1, entries: [...entries], resourceVersion: old?.metadata.resourceVersion };
      gz = encodeTombstones(next.entries);
      if (gz.length > this.bytes)
        throw new Error(
          `the tombstones of one write are ${gz.length} bytes gzipped, above ${this.bytes}: not written`,
        );
    }
    const name = tombstoneConfigMapNames(fn)[next.i]!;
    const body = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: {
        name,
        namespace: this.namespace,
        labels: {
          'app.kubernetes.io/name': 'twopass',
          'twopass.io/function': fn,
          'twopass.io/tombstones': 'true',
        },
        annotations: { [A_SEQ]: String(next.seq) },
        ...(next.resourceVersion ? { resourceVersion: next.resourceVersion } : {}),
      },
      binaryData: { [KEY]: gz.toString('base64') },
    } as unknown as Cm;
    try {
      const written = next.resourceVersion
        ? await this.kube.replace(CONFIGMAPS, body, signal)
        : await this.kube.create(CONFIGMAPS, body, signal);
      this.newest.set(fn, { ...next, resourceVersion: written.metadata.resourceVersion });
    } catch (err) {
      this.newest.delete(fn);
      if (err instanceof ConflictError)
        throw new Error(`tombstones of ${fn}: ${name} was written by someone else meanwhile: not written`);
      throw err;
    }
  }
}

/**
 * On disk: `<dir>/<fn>.tombstones.json.gz`, gzip members of JSON lines. An append adds one
 * member and fsyncs (a run deleting a thousand appends a few KiB at a time, never rewrites
 * the file); the file is compacted to the retention (temp file, fsync, rename) the first
 * time a process appends to it and when it holds a quarter more than `maxEntries`.
 */
export class FileTombstones implements TombstoneStore {
  private readonly dir: string;
  private readonly now: () => number;
  private readonly retention: TombstoneRetention;
  /** Entries in each function's file since this process compacted it. */
  private readonly counts = new Map<string, number>();
  constructor(dir: string, now: () => number, retention: TombstoneRetention = TOMBSTONE_RETENTION) {
    this.dir = dir;
    this.now = now;
    this.retention = retention;
  }
  path(fn: string): string {
    return join(this.dir, `${fn}.tombstones.json.gz`);
  }
  private readonly damaged = new Map<string, string>();
  /**
   * What is intact: a torn last member (a crash during an append, whose deletion then never
   * happened) or a garbled line is left out and said (`damage`), never a reason to refuse
   * every deletion and restore.
   */
  private async read(fn: string): Promise<Tombstone[]> {
    this.damaged.delete(fn);
    let gz: Buffer;
    try {
      gz = await readFile(this.path(fn));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const { text, damaged } = gunzipTolerant(gz);
    const out: Tombstone[] = [];
    let lost = 0;
    for (const line of text.split('\n')) {
      if (line === '') continue;
      let t: ReturnType<typeof tombstoneSchema.safeParse> | undefined;
      try {
        t = tombstoneSchema.safeParse(JSON.parse(line));
      } catch {
        t = undefined;
      }
      if (t?.success) out.push(t.data);
      else lost++;
    }
    if (damaged || lost > 0)
      this.damaged.set(
        fn,
        `${this.path(fn)}: ${damaged ? 'a damaged gzip member (a write torn by a crash)' : 'garbled lines'}${lost ? `, ${lost} unreadable entr${lost === 1 ? 'y' : 'ies'}` : ''}: kept the ${out.length} intact; the damaged file is kept beside it when it is next compacted`,
      );
    return out;
  }
  damage(fn: string): string | undefined {
    return this.damaged.get(fn);
  }
  async list(fn: string): Promise<Tombstone[]> {
    return retain(await this.read(fn), this.now(), this.retention);
  }
  async append(fn: string, entries: readonly Tombstone[]): Promise<void> {
    ensureDir(this.dir);
    const member = gzipSync(Buffer.from(entries.map((e) => `${JSON.stringify(e)}\n`).join('')));
    const count = this.counts.get(fn);
    if (count !== undefined && count + entries.length <= this.retention.maxEntries * 1.25) {
      await writeSynced(this.path(fn), member, true);
      this.counts.set(fn, count + entries.length);
      return;
    }
    // compact: what the retention keeps, then these, in a new file put in place at once; a
    // damaged file is kept beside it first (what it still holds is never thrown away)
    const read = await this.read(fn);
    if (this.damaged.has(fn)) await copyFile(this.path(fn), `${this.path(fn)}.damaged-${this.now()}`);
    const kept = retain([...read, ...entries], this.now(), this.retention);
    const tmp = `${this.path(fn)}.${randomUUID()}.tmp`;
    await writeSynced(tmp, gzipSync(Buffer.from(kept.map((e) => `${JSON.stringify(e)}\n`).join(''))), false);
    await rename(tmp, this.path(fn));
    this.counts.set(fn, kept.length);
  }
}
