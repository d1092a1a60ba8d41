/**
 * ConfigMapStateStore: the in-cluster default. The state is gzipped JSON in the
 * head ConfigMap `twopass-<function>`; when larger than ~900 KiB it is split
 * over shard ConfigMaps `twopass-<function>-s<slot>-<i>`, written before the
 * head into the slot the head does not point at (two slots, alternating, so
 * RBAC can name every ConfigMap a function may touch). The head is written with
 * its resourceVersion, so a stale writer loses; it names the generation, shard
 * count and a checksum, so a reader never mixes shards of two writes.
 */
import { createHash } from 'node:crypto';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { State } from '../engine/types.ts';
import { emptyState } from '../engine/types.ts';
import { ConflictError, KubeApiError } from '../kube/errors.ts';
import type { KubeClient } from '../kube/ports.ts';
import { CONFIGMAPS, type KubeObject } from '../kube/resources.ts';
import { resetCommand, StateConflictError, StateCorruptError, StateTooLargeError } from './errors.ts';
import { ConfigMapHistory, type HistoryStore, historyConfigMapName } from './history.ts';
import { parseState } from './schema.ts';
import type { Loaded, StateStore } from './store.ts';
import { ConfigMapTombstones, type TombstoneStore, tombstoneConfigMapNames } from './tombstones.ts';

export const SHARD_BYTES = 900 * 1024;
export const MAX_SHARDS = 8;
const KEY = 'state.json.gz';
const A_GEN = 'twopass.io/generation';
const A_SHARDS = 'twopass.io/shards';
const A_SHA = 'twopass.io/sha256';

type ConfigMap = KubeObject & { binaryData?: Record<string, string>; data?: Record<string, string> };

export class ConfigMapStateStore implements StateStore {
  readonly description: string;
  private readonly kube: KubeClient;
  private readonly namespace: string;
  private readonly shardBytes: number;
  readonly tombstones: TombstoneStore;
  readonly history: HistoryStore;
  constructor(kube: KubeClient, namespace: string, shardBytes = SHARD_BYTES, now: () => number = Date.now) {
    this.kube = kube;
    this.namespace = namespace;
    this.shardBytes = shardBytes;
    this.description = `configmap:${namespace}`;
    this.tombstones = new ConfigMapTombstones(kube, namespace, now);
    this.history = new ConfigMapHistory(kube, namespace);
  }

  headName(fn: string): string {
    return `twopass-${fn}`;
  }

  private shardName(fn: string, gen: number, i: number): string {
    return shardName(fn, gen % 2, i);
  }

  async load(fn: string, signal?: AbortSignal): Promise<Loaded> {
    const where = `ConfigMap ${this.namespace}/${this.headName(fn)}`;
    const head = (await this.kube.get(CONFIGMAPS, this.namespace, this.headName(fn), signal)) as
      | ConfigMap
      | undefined;
    if (!head) return { state: emptyState(fn) };
    const ann = head.metadata.annotations ?? {};
    const shards = Number(ann[A_SHARDS] ?? '1');
    const gen = Number(ann[A_GEN] ?? '0');
    if (!Number.isInteger(shards) || shards < 1 || shards > MAX_SHARDS || !Number.isInteger(gen)) {
      throw new StateCorruptError(
        `${where}: bad shard annotations (${A_SHARDS}=${ann[A_SHARDS]}, ${A_GEN}=${ann[A_GEN]})`,
      );
    }
    const parts: Buffer[] = [];
    if (shards === 1) {
      parts.push(decode(head, where));
    } else {
      for (let i = 0; i < shards; i++) {
        const name = this.shardName(fn, gen, i);
        const cm = (await this.kube.get(CONFIGMAPS, this.namespace, name, signal)) as ConfigMap | undefined;
        if (!cm) throw new StateCorruptError(`${where}: shard ${name} is missing`);
        parts.push(decode(cm, `ConfigMap ${this.namespace}/${name}`));
      }
    }
    const gz = Buffer.concat(parts);
    const sha = createHash('sha256').update(gz).digest('hex');
    if (ann[A_SHA] !== undefined && ann[A_SHA] !== sha)
      throw new StateCorruptError(`${where}: checksum mismatch (stored ${ann[A_SHA]}, read ${sha})`);
    let raw: unknown;
    try {
      raw = JSON.parse(gunzipSync(gz).toString('utf8'));
    } catch (err) {
      throw new StateCorruptError(
        `${where}: state is not gzipped JSON; reset it with \`${resetCommand(fn, this.description)}\``,
        { cause: err },
      );
    }
    return { state: parseState(raw, fn, where, this.description), version: head.metadata.resourceVersion };
  }

  async save(fn: string, state: State, version: string | undefined, signal?: AbortSignal): Promise<string> {
    const where = `ConfigMap ${this.namespace}/${this.headName(fn)}`;
    const gz = gzipSync(JSON.stringify(state));
    const sha = createHash('sha256').update(gz).digest('hex');
    const count = Math.max(1, Math.ceil(gz.length / this.shardBytes));
    if (count > MAX_SHARDS)
      throw new StateTooLargeError(
        `${where}: state needs ${count} shards of ${this.shardBytes} bytes (max ${MAX_SHARDS})`,
      );
    const existing = (await this.kube.get(CONFIGMAPS, this.namespace, this.headName(fn), signal)) as
      | ConfigMap
      | undefined;
    if ((existing?.metadata.resourceVersion ?? undefined) !== version) {
      throw new StateConflictError(
        `${where}: state changed since it was loaded (resourceVersion ${version ?? 'none'} -> ${existing?.metadata.resourceVersion ?? 'none'})`,
      );
    }
    const oldGen = Number(existing?.metadata.annotations?.[A_GEN] ?? '0');
    const oldShards = Number(existing?.metadata.annotations?.[A_SHARDS] ?? '1');
    const gen = oldGen + 1;
    const labels = { 'app.kubernetes.io/managed-by': 'twopass', 'twopass.io/function': fn };
    if (count > 1) {
      for (let i = 0; i < count; i++) {
        const chunk = gz.subarray(i * this.shardBytes, (i + 1) * this.shardBytes);
        const shard = {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: this.shardName(fn, gen, i), namespace: this.namespace, labels },
          binaryData: { [KEY]: chunk.toString('base64') },
        };
        const old = await this.kube.get(CONFIGMAPS, this.namespace, shard.metadata.name, signal);
        if (old)
          await this.kube.replace(
            CONFIGMAPS,
            {
              ...shard,
              metadata: {
                ...shard.metadata,
                uid: old.metadata.uid,
                resourceVersion: old.metadata.resourceVersion,
              },
            },
            signal,
          );
        else await this.kube.create(CONFIGMAPS, shard, signal);
      }
    }
    const head: ConfigMap = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: {
        name: this.headName(fn),
        namespace: this.namespace,
        labels,
        annotations: { [A_GEN]: String(gen), [A_SHARDS]: String(count), [A_SHA]: sha },
        uid: existing?.metadata.uid ?? '',
        resourceVersion: existing?.metadata.resourceVersion ?? '',
      },
      binaryData: count === 1 ? { [KEY]: gz.toString('base64') } : {},
    };
    let written: KubeObject;
    try {
      if (existing) {
        written = await this.kube.replace(CONFIGMAPS, head, signal);
      } else {
        const { uid: _u, resourceVersion: _r, ...md } = head.metadata;
        written = await this.kube.create(CONFIGMAPS, { ...head, metadata: md }, signal);
      }
    } catch (err) {
      if (err instanceof ConflictError || (err instanceof KubeApiError && err.status === 409)) {
        throw new StateConflictError(
          `${where}: another writer saved state first; this run's state was not written`,
          { cause: err },
        );
      }
      throw err;
    }
    // Read back: a success that did not happen must not let a later run load older state.
    const back = await this.kube.get(CONFIGMAPS, this.namespace, this.headName(fn), signal);
    if (
      back?.metadata.resourceVersion !== written.metadata.resourceVersion ||
      back.metadata.annotations?.[A_SHA] !== sha
    )
      throw new StateConflictError(
        `${where}: the write answered success, but a read-back finds ${back ? `resourceVersion ${back.metadata.resourceVersion}` : 'no ConfigMap'}, not what was written`,
      );
    // The slot the head used to point at is free now.
    if (oldShards > 1) await this.dropShards(fn, oldGen, oldShards, signal);
    return written.metadata.resourceVersion;
  }

  private async dropShards(fn: string, gen: number, count: number, signal?: AbortSignal): Promise<void> {
    for (let i = 0; i < count; i++) {
      await this.kube
        .delete(CONFIGMAPS, this.namespace, this.shardName(fn, gen, i), signal)
        .catch(() => undefined);
    }
  }

  async reset(fn: string, signal?: AbortSignal): Promise<boolean> {
    const head = (await this.kube.get(CONFIGMAPS, this.namespace, this.headName(fn), signal)) as
      | ConfigMap
      | undefined;
    if (!head) return false;
    const gen = Number(head.metadata.annotations?.[A_GEN] ?? '0');
    const shards = Number(head.metadata.annotations?.[A_SHARDS] ?? '1');
    await this.kube.delete(CONFIGMAPS, this.namespace, this.headName(fn), signal);
    if (shards > 1) await this.dropShards(fn, gen, shards, signal);
    return true;
  }
}

/** The names of every ConfigMap the store may use for a function (for RBAC resourceNames). */
export function stateConfigMapNames(fn: string): string[] {
  const names = [`twopass-${fn}`];
  for (const slot of [0, 1]) for (let i = 0; i < MAX_SHARDS; i++) names.push(shardName(fn, slot, i));
  return [...names, ...tombstoneConfigMapNames(fn), historyConfigMapName(fn)];
}

function shardName(fn: string, slot: number, i: number): string {
  return `twopass-${fn}-s${slot}-${i}`;
}

function decode(cm: ConfigMap, where: string): Buffer {
  const b64 = cm.binaryData?.[KEY];
  if (typeof b64 !== 'string') throw new StateCorruptError(`${where}: binaryData.${KEY} is missing`);
  return Buffer.from(b64, 'base64');
}
