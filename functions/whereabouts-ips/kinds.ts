/**
 * The two target kinds of whereabouts-ips: an allocation in an IPPool (removed by a JSON
 * Patch that tests each allocation it removes, the allocations of one pool together) and
 * an OverlappingRangeIPReservation (deleted with preconditions).
 */
import { z } from 'zod';
import {
  type Answer,
  type BatchItemResult,
  type BatchSpec,
  checkFreshCount,
  type EventNote,
  freshEvidence,
  type KindSpec,
  kubeObject,
  namespacesSetting,
  pageSizeSetting,
  type RestoreResult,
  type RunContext,
  type Settled,
  type Step,
  type Tombstone,
  type Typed,
  type WritePlan,
} from '../../shared/contract/index.ts';
import { readPayload } from '../../shared/contract/tombstone.ts';
import { ConflictError, KubeApiError } from '../../shared/kube/errors.ts';
import type { JsonPatchOp, KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { answerShowsWrite, type KubeObject, PODS } from '../../shared/kube/resources.ts';
import { GROUP, IPPOOLS } from './model.ts';
import { judge, type PodView, podMap, podView } from './pods.ts';

/** The settings of whereabouts-ips (`functions.whereabouts-ips.settings`). */
export const whereaboutsIpsSettings = z
  .object({
    namespaces: namespacesSetting
      .optional()
      .describe('only pools and reservations of these namespaces are targets (default: all)'),
    pageSize: pageSizeSetting.default(500).describe('items per list page'),
  })
  .strict();

export type Settings = z.output<typeof whereaboutsIpsSettings>;
type Ctx = RunContext<Settings>;
const PATCH_ATTEMPTS = 5;

export const allocData = z.object({
  namespace: z.string(),
  pool: z.string().min(1),
  poolUid: z.string().min(1),
  offset: z.string().regex(/^\d+$/),
  id: z.string(),
  podref: z.string().regex(/^[^/]+\/[^/]+$/),
  ifname: z.string(),
  ip: z.string().min(1),
});
export type AllocData = z.output<typeof allocData>;

export const resvData = z.object({
  namespace: z.string(),
  name: z.string().min(1),
  uid: z.string().min(1),
  rv: z.string().min(1),
  podref: z.string().regex(/^[^/]+\/[^/]+$/),
  ip: z.string().min(1),
});
export type ResvData = z.output<typeof resvData>;

type RawAllocation = { id?: string; podref?: string; ifname?: string };

function allocationAt(pool: KubeObject, offset: string): RawAllocation | undefined {
  const allocs = (pool.spec as { allocations?: Record<string, RawAllocation> } | undefined)?.allocations;
  return allocs && Object.hasOwn(allocs, offset) ? allocs[offset] : undefined;
}

function sameAllocation(a: RawAllocation | undefined, d: AllocData): boolean {
  return a !== undefined && a.id === d.id && a.podref === d.podref && (a.ifname ?? '') === d.ifname;
}

/** The pool now: the one observed, gone (a 404), or another object of its name (re-created). */
async function poolNow(kube: KubeReader, d: AllocData, signal: AbortSignal) {
  const pool = await kube.get(IPPOOLS, d.namespace, d.pool, signal);
  if (!pool) return 'gone' as const;
  return pool.metadata.uid === d.poolUid ? pool : ('re-created' as const);
}

const isPatchConflict = (err: unknown) =>
  err instanceof ConflictError || (err instanceof KubeApiError && err.status === 422);

/** A removal's patch the server refused (a test failed, a conflict) or found no pool for: planned again on the pool as read. */
const isPatchRefused = (err: unknown) =>
  isPatchConflict(err) || (err instanceof KubeApiError && err.status === 404);

/** The Event on the whereabouts object a removal changed. */
export const reclaimed = (
  kind: 'IPPool' | 'OverlappingRangeIPReservation',
  o: { namespace: string; name: string; uid: string },
  message: string,
): EventNote => ({
  namespace: o.namespace,
  involved: { apiVersion: `${GROUP}/v1alpha1`, kind, name: o.name, namespace: o.namespace, uid: o.uid },
  reason: 'WhereaboutsAddressReclaimed',
  message,
});

const removedText = (d: AllocData) =>
  `allocation ${d.ip} (offset ${d.offset}, container ${d.id.slice(0, 12)}) removed from IPPool ${d.namespace}/${d.pool}`;

/** Up to this many pods a batch names are read one by one; more, and their namespaces are listed. */
export const POD_READS_PER_BATCH = 50;

/**
 * What a GET of one pod costs the apiserver, in pods listed: a GET by name takes about
 * 0.5-0.7 ms of its CPU, a pod in a metadata-only list of 500 a page 25-47 us (test/bench/
 * RESULTS.md, "listing 50,000 pods"). A list is one request where the GETs are many, but
 * the server's work is what a re-check costs the cluster.
 */
export const LISTED_PODS_PER_GET = 20;

/**
 * Whether the batches re-check their pods on one list of every pod, shared (read after the
 * decision, again once older than the run's evidenceMaxAge, held to the snapshot's count)
 * rather than a read of each: when reading each pod the run's allocations name would cost
 * the apiserver more than listing every pod the snapshot counted (a node lost from a small
 * cluster); 300 leaks among 30,000 pods are 300 GETs.
 */
function sharedPodList(ctx: Ctx): boolean {
  const pods = ctx.evidenceCount?.('pods');
  if (ctx.fresh === undefined || pods === undefined) return false;
  const named = new Set<string>();
  for (const t of ctx.confirmed ?? []) {
    const d = t.data;
    const ref = typeof d === 'object' && d !== null && 'podref' in d ? d.podref : undefined;
    if (t.kind.startsWith('IPPoolAllocation') && typeof ref === 'string') named.add(ref);
  }
  return named.size * LISTED_PODS_PER_GET > pods;
}

/** Every pod, listed as the snapshot lists them (metadata only) into one map: the run's shared evidence. */
async function allPods(reader: KubeReader, ctx: Ctx): Promise<ReadonlyMap<string, PodView>> {
  const read = await freshEvidence(ctx, 'whereabouts-ips:pods', async () => {
    const listed = podMap();
    const { pageSize } = ctx.settings;
    const l = await reader.listAll(PODS, {
      metadataOnly: true,
      pageSize,
      signal: ctx.signal,
      view: listed.view,
    });
    checkFreshCount(ctx, 'pods', l.items.length);
    return listed.pods;
  });
  return read.value;
}

/**
 * The evidence of a batch, fresh: the run's shared list of every pod when that costs the
 * apiserver less (`shared`, from `sharedPodList`), else a read of each pod it names (a GET by name answers for
 * exactly the podref the judgement looks up, law 6's narrow evidence; a list of a
 * namespace of 30,000 pods for every pool touched cost the apiserver far more). A batch
 * that names more pods than POD_READS_PER_BATCH lists their namespaces once instead,
 * complete, metadata only.
 */
async function freshPods(
  reader: KubeReader,
  podrefs: readonly string[],
  ctx: Ctx,
  shared: boolean,
): Promise<ReadonlyMap<string, PodView>> {
  const { signal } = ctx;
  if (shared) return allPods(reader, ctx);
  const pods = new Map<string, PodView>();
  if (podrefs.length <= POD_READS_PER_BATCH) {
    for (const ref of podrefs) {
      const [ns, name] = ref.split('/') as [string, string];
      const pod = await reader.get(PODS, ns, name, signal);
      if (pod) pods.set(ref, podView(pod));
    }
    return pods;
  }
  const listed = podMap();
  for (const ns of [...new Set(podrefs.map((r) => r.split('/')[0]!))].sort())
    await reader.listAll(PODS, { namespace: ns, metadataOnly: true, signal, view: listed.view });
  return listed.pods;
}

/**
 * The confirmed allocations of one IPPool, together, in one step the runtime runs: a plan
 * re-checks every allocation on fresh evidence of the pods they name (one that finds use is
 * kept); one JSON Patch removes those still unused, testing each as observed (after a
 * refusal, as the pool is read then); a refusal is planned again, never retried blind; the
 * patch's answer, or a read of the pool, is the read-back.
 */
function allocationSteps(
  _reader: KubeReader,
  targets: readonly Typed<AllocData>[],
  ctx: Ctx,
): readonly Step<AllocData, KubeReader, KubeReadWriter>[] {
  const d0 = targets[0]!.data;
  const podrefs = [...new Set(targets.map((t) => t.data.podref))].sort();
  const shared = sharedPodList(ctx);
  return [
    {
      takes: () => true,
      attempts: PATCH_ATTEMPTS,
      contended: isPatchRefused,
      async plan(reader, pending, attempt): Promise<WritePlan<KubeReader, KubeReadWriter>> {
        // The first attempt reads no pool: its patch tests each allocation as both snapshots
        // saw it (and the pool's UID), which the server checks on the pool as it is when it
        // writes. After a refusal, the pool is read and each allocation re-checked on it.
        const pool = attempt === 1 ? undefined : await poolNow(reader, d0, ctx.signal);
        if (pool === 'gone')
          return {
            removing: [],
            results: pending.map((t) => ({ key: t.key, outcome: 'gone', detail: 'pool is gone' })),
          };
        // Another object of the pool's name: not the allocations observed, and not "deleted" either.
        if (pool === 're-created')
          return {
            removing: [],
            results: pending.map((t) => ({
              key: t.key,
              outcome: 'skipped',
              reason: 'the pool was re-created (another UID): its allocations are judged anew',
            })),
          };
        const pods = await freshPods(reader, podrefs, ctx, shared);
        const results: BatchItemResult[] = [];
        const removing: Typed<AllocData>[] = [];
        for (const t of pending) {
          const d = t.data;
          const skip = (reason: string) => results.push({ key: t.key, outcome: 'skipped', reason });
          if (pool && !sameAllocation(allocationAt(pool, d.offset), d))
            skip(`re-check: allocation at offset ${d.offset} changed in the fresh pool`);
          else {
            const j = judge(pods, d.podref, d.ip);
            if (j === 'unused') removing.push(t);
            else skip(`re-check: ${j === 'used' ? `pod ${d.podref} uses ${d.ip}` : j.indeterminate}`);
          }
        }
        if (removing.length === 0) return { removing: [], results };
        const sent = pool?.metadata.resourceVersion;
        // each allocation as the patch tests it: its tombstone (the patch goes through only if it is so)
        const tested = (t: Typed<AllocData>) => (pool ? allocationAt(pool, t.data.offset) : observed(t.data));
        return {
          results,
          removing: removing.map((t) => ({
            target: t,
            object: tested(t) satisfies z.input<typeof ALLOCATION_TOMBSTONE.object> | undefined,
            restore: {
              namespace: d0.namespace,
              pool: d0.pool,
              poolUid: d0.poolUid,
              offset: t.data.offset,
              ip: t.data.ip,
              podref: t.data.podref,
            } satisfies z.input<typeof ALLOCATION_TOMBSTONE.restore>,
          })),
          write: (kube, signal) =>
            kube.jsonPatch(IPPOOLS, d0.namespace, d0.pool, patchOf(d0.poolUid, removing, tested), signal),
          readBack: (r, out) => readBackAllocations(r, out, d0, removing, sent, ctx.signal),
          lost: (n) => ({
            results: removing.map((t) => ({
              key: t.key,
              outcome: 'skipped',
              reason: `pool kept changing (${n} conflicts): kept for the next run`,
              contended: true,
            })),
          }),
        };
      },
    },
  ];
}

/**
 * An allocation still there was not removed, whatever the patch answered. The patch's own
 * answer is that read when it shows the patch: the same pool (UID), at a new
 * resourceVersion when one was read, holding none of the allocations removed (a proxy's
 * "success" that never reached the server answers the pool as it was, the allocations
 * still in it, and is read again; decision 0007).
 */
async function readBackAllocations(
  r: KubeReader,
  out: Answer,
  d0: AllocData,
  removing: readonly Typed<AllocData>[],
  sent: string | undefined,
  signal: AbortSignal,
): Promise<Settled> {
  const unknown = 'unknown' in out ? `unknown answer (${out.unknown}), read back: ` : undefined;
  const answer = 'answer' in out ? (out.answer as KubeObject | undefined) : undefined;
  const ofThePool =
    sent === undefined ? answer?.metadata?.uid === d0.poolUid : answerShowsWrite(answer, d0.poolUid, sent);
  const shown =
    answer && ofThePool && removing.every((t) => !sameAllocation(allocationAt(answer, t.data.offset), t.data))
      ? answer
      : undefined;
  const after = shown ?? (await poolNow(r, d0, signal).catch(() => 'unreadable' as const));
  // another pool of the name: the patch's own pool is gone, whether it was written is not known
  if (after === 're-created')
    return {
      results: removing.map((t) => ({
        key: t.key,
        outcome: 'skipped',
        reason: 'the pool was re-created (another UID) before the removal could be read back: judged anew',
      })),
    };
  return {
    results: removing.map((t): BatchItemResult => {
      const still =
        after === 'unreadable'
          ? unknown !== undefined
          : typeof after !== 'string' && sameAllocation(allocationAt(after, t.data.offset), t.data);
      return still
        ? {
            key: t.key,
            outcome: 'failed',
            error: unknown
              ? `${unknown}the allocation is still there (or the pool cannot be read)`
              : 'the patch answered success, but a read-back still finds the allocation',
          }
        : { key: t.key, outcome: 'deleted', detail: `${unknown ?? ''}${removedText(t.data)}` };
    }),
  };
}

/** An allocation as both snapshots saw it: what the first attempt's patch tests (whereabouts writes these three). */
function observed(d: AllocData): RawAllocation {
  return { id: d.id, podref: d.podref, ...(d.ifname !== '' ? { ifname: d.ifname } : {}) };
}

/**
 * The patch that removes `removing` from the pool: it tests the pool's UID, and each
 * allocation exactly as `tested` gives it (as observed, or as just read after a refusal)
 * before removing it. The server applies a JSON patch to the pool as it is when it writes
 * and refuses it whole if any test fails: an allocation re-used by a new pod, taken over by
 * a re-created one, or a pool re-created under the same name, whatever else was allocated or
 * freed beside it (decision 0014; no read of the pool before it, decision 0018).
 */
function patchOf(
  poolUid: string,
  removing: readonly Typed<AllocData>[],
  tested: (t: Typed<AllocData>) => RawAllocation | undefined,
): JsonPatchOp[] {
  const path = (t: Typed<AllocData>) => `/spec/allocations/${t.data.offset}`;
  return [
    { op: 'test', path: '/metadata/uid', value: poolUid },
    ...removing.flatMap((t) => [
      { op: 'test' as const, path: path(t), value: tested(t) },
      { op: 'remove' as const, path: path(t) },
    ]),
  ];
}

const allocBatch: BatchSpec<AllocData, KubeReader, KubeReadWriter, Settings> = {
  key: (d) => d.poolUid,
  steps: allocationSteps,
};

export const allocationKind: KindSpec<AllocData, KubeReader, KubeReadWriter, Settings> = {
  data: allocData,
  unused: 'no pod of its podref (namespace/name) exists',
  removal:
    "remove the allocation from the IPPool (one JSON patch a pool, that tests the pool's UID and each allocation as observed before removing it: a pool whose allocation changed is read again and re-checked, never patched blind)",
  touches: (d) => [{ object: kubeObject(IPPOOLS, d.namespace, d.pool) }],
  event(removed) {
    const d0 = removed[0]!.target.data;
    const ips = removed.map((r) => r.target.data.ip);
    return reclaimed(
      'IPPool',
      { namespace: d0.namespace, name: d0.pool, uid: d0.poolUid },
      `twopass removed ${ips.length} allocation${ips.length === 1 ? '' : 's'} of pods that are gone or no longer hold the address: ${ips.join(', ')}`,
    );
  },
  batch: allocBatch,
  restore: restoreAllocation,
  place: (d) => `${d.namespace}/${d.pool}`,
};

/** An allocation's tombstone: the allocation as its pool held it, and where it was. */
export const ALLOCATION_TOMBSTONE = {
  object: z
    .object({ id: z.string().optional(), podref: z.string().optional(), ifname: z.string().optional() })
    .passthrough()
    .refine((a) => Boolean(a.id || a.podref), 'an allocation with neither id nor podref'),
  restore: z.object({
    namespace: z.string().min(1),
    pool: z.string().min(1),
    poolUid: z.string().min(1),
    offset: z.string().regex(/^\d+$/, 'expected a decimal offset'),
    ip: z.string().min(1),
    podref: z.string(),
  }),
};

/**
 * An allocation back in its IPPool, at its offset, only if the pool is the same one and
 * the offset is free now; one JSON Patch that tests the pool's resourceVersion read for
 * the check adds it (a pool changed meanwhile refuses: run restore again).
 */
async function restoreAllocation(
  _reader: KubeReader,
  kube: KubeReadWriter,
  tomb: Tombstone,
  ctx: Ctx & Readonly<{ apply: boolean }>,
): Promise<RestoreResult> {
  const read = readPayload(tomb, ALLOCATION_TOMBSTONE);
  if (!read.ok) return { outcome: 'refused', reason: read.reason };
  const { object: allocation, restore: r } = read;
  const pool = await kube.get(IPPOOLS, r.namespace, r.pool, ctx.signal);
  if (!pool) return { outcome: 'refused', reason: `IPPool ${r.namespace}/${r.pool} is gone` };
  if (pool.metadata.uid !== r.poolUid)
    return { outcome: 'refused', reason: `IPPool ${r.namespace}/${r.pool} was re-created (another UID)` };
  const now = allocationAt(pool, r.offset);
  if (now)
    return {
      outcome: 'refused',
      reason: `${r.ip} (offset ${r.offset}) is allocated again, to ${now.podref ?? now.id}`,
    };
  const what = `${r.ip} for ${r.podref} in IPPool ${r.namespace}/${r.pool}`;
  if (!ctx.apply) return { outcome: 'ready', detail: `${what} would be allocated again` };
  try {
    await kube.jsonPatch(
      IPPOOLS,
      r.namespace,
      r.pool,
      [
        { op: 'test', path: '/metadata/resourceVersion', value: pool.metadata.resourceVersion },
        (pool.spec as { allocations?: unknown } | undefined)?.allocations
          ? { op: 'add', path: `/spec/allocations/${r.offset}`, value: allocation }
          : { op: 'add', path: '/spec/allocations', value: { [r.offset]: allocation } },
      ],
      ctx.signal,
    );
  } catch (err) {
    if (isPatchConflict(err))
      return {
        outcome: 'refused',
        reason: `IPPool ${r.namespace}/${r.pool} changed meanwhile: run restore again`,
      };
    throw err;
  }
  return { outcome: 'restored', detail: `${what} allocated again` };
}
