/**
 * A rule's lists: its targets and its evidence, complete or not at all, and the evidence
 * indexed by each list's key expression. Evaluation gives the event loop a turn every few
 * milliseconds (the pacer), so a run's deadline and SIGTERM stop it between objects.
 */
import type { ObserveContext } from '../contract/index.ts';
import type { KubeReader } from '../kube/ports.ts';
import { apiVersionOf, type KubeObject } from '../kube/resources.ts';
import { toCel } from './cel.ts';
import type { EvidenceSpec, ListSpec, Rule } from './rule.ts';

/** Evidence indexes by name: key → the evidence objects (as CEL sees them) with that key. */
export type Indexes = Record<string, Map<string, unknown[]>>;

/** Lists one resource (per namespace when limited): every item, or ListIncompleteError. */
export async function listSpec(
  kube: KubeReader,
  spec: ListSpec,
  namespaces: readonly string[] | undefined,
  pageSize: number,
  signal: AbortSignal,
): Promise<{ items: KubeObject[]; resourceVersion?: string; pages: number }> {
  const scopes = spec.ref.namespaced && namespaces?.length ? namespaces : [undefined];
  const items: KubeObject[] = [];
  let pages = 0;
  let resourceVersion: string | undefined;
  for (const namespace of scopes) {
    const l = await kube.listAll(spec.ref, {
      ...(namespace !== undefined ? { namespace } : {}),
      ...(spec.labelSelector ? { labelSelector: spec.labelSelector } : {}),
      ...(spec.fieldSelector ? { fieldSelector: spec.fieldSelector } : {}),
      metadataOnly: spec.metadataOnly,
      pageSize,
      signal,
    });
    for (const o of l.items) items.push(o);
    pages += l.pages;
    resourceVersion = l.resourceVersion;
  }
  return { items, pages, ...(scopes.length === 1 && resourceVersion ? { resourceVersion } : {}) };
}

export type EvidenceRead = Readonly<{
  indexes: Indexes;
  /** Why nothing can be decided against this evidence (an unserved list, a key that cannot be read). */
  blockers: string[];
  counts: Record<string, { count: number; pages: number; resourceVersion?: string; notServed?: true }>;
}>;

/** Lists every evidence source of a rule and indexes it by its key expression. */
export async function readEvidence(
  rule: Pick<Rule, 'evidence'>,
  kube: KubeReader,
  pageSize: number,
  signal: AbortSignal,
): Promise<EvidenceRead> {
  const indexes: Indexes = {};
  const blockers: string[] = [];
  const counts: EvidenceRead['counts'] = {};
  for (const e of rule.evidence) {
    const index = new Map<string, unknown[]>();
    indexes[e.name] = index;
    if (!(await kube.serves(e.ref.group, e.ref.version, e.ref.plural, signal))) {
      counts[e.name] = { count: 0, pages: 0, notServed: true };
      if (!e.optional)
        blockers.push(
          `evidence ${e.name} (${e.ref.plural}.${apiVersionOf(e.ref)}) is not served; nothing can be shown unused without it (mark it \`optional\` if its absence means it holds nothing)`,
        );
      continue;
    }
    const l = await listSpec(kube, e, e.namespaces, pageSize, signal);
    counts[e.name] = {
      count: l.items.length,
      pages: l.pages,
      ...(l.resourceVersion ? { resourceVersion: l.resourceVersion } : {}),
    };
    const bad = await indexEvidence(e, l.items, index, signal, kubeName);
    if (bad.length > 0)
      blockers.push(
        `evidence ${e.name}: the key of ${bad.length} object(s) cannot be read, so what they hold is unknown: ${bad.slice(0, 3).join('; ')}`,
      );
  }
  return { indexes, blockers, counts };
}

const NO_OBJECTS: unknown[] = [];

/**
 * Evaluation is synchronous: a loop over 150,000 objects would hold the process (its
 * deadline, SIGTERM, a scheduler's other functions and /healthz) until it ends. The pacer
 * gives the event loop a turn every few milliseconds of evaluation and stops the loop
 * once the run's signal is aborted.
 */
export function pacer(signal: AbortSignal, sliceMs = 10): () => Promise<void> | undefined {
  let since = performance.now();
  return () => {
    // The clock is read after every object: one slow object is enough to give up the turn.
    if (performance.now() - since < sliceMs) return undefined;
    return new Promise<void>((resolve, reject) =>
      setImmediate(() => {
        since = performance.now();
        if (signal.aborted) reject(signal.reason);
        else resolve();
      }),
    );
  };
}

const kubeName = (o: KubeObject) =>
  `${o.metadata?.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata?.name}`;

/** Adds each object under its key(s); returns why the keys of some objects cannot be read. */
export async function indexEvidence<T>(
  e: Pick<EvidenceSpec, 'key' | 'readsValues'>,
  items: readonly T[],
  index: Map<string, unknown[]>,
  signal: AbortSignal,
  nameOf: (o: T) => string,
): Promise<string[]> {
  const bad: string[] = [];
  const pace = pacer(signal);
  for (const o of items) {
    await pace();
    const object = toCel(o);
    const r = e.key.evaluate({ object });
    const where = () => nameOf(o);
    if (!r.ok) {
      bad.push(`${where()}: ${r.error}`);
      continue;
    }
    const keys = Array.isArray(r.value) ? r.value : [r.value];
    for (const k of keys) {
      if (k === null || k === undefined) continue;
      if (typeof k !== 'string' && typeof k !== 'bigint') {
        bad.push(`${where()}: the key is ${typeof k}, not a string or an int`);
        continue;
      }
      const key = String(k);
      // only the keys matter unless a condition reads the objects: one shared empty list
      if (!e.readsValues) index.set(key, NO_OBJECTS);
      else {
        const at = index.get(key);
        if (at) at.push(object);
        else index.set(key, [object]);
      }
    }
  }
  return bad;
}

/** The evidence lists as sources of the snapshot (their counts, pages and versions) and its blockers. */
export function reportEvidence(
  ctx: Pick<ObserveContext<unknown, Record<string, unknown>>, 'source' | 'blocker'>,
  rule: Readonly<{ evidence: readonly Readonly<{ name: string }>[] }>,
  ev: EvidenceRead,
): void {
  for (const e of rule.evidence) {
    const c = ev.counts[e.name]!;
    ctx.source(
      `evidence.${e.name}`,
      'evidence',
      c.notServed
        ? { notServed: true }
        : {
            items: { length: c.count },
            pages: c.pages,
            ...(c.resourceVersion ? { resourceVersion: c.resourceVersion } : {}),
          },
    );
  }
  for (const b of ev.blockers) ctx.blocker(b);
}
