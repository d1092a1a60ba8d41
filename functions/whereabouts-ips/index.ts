/**
 * whereabouts-ips: reclaims IPPool allocations and OverlappingRangeIPReservations
 * whose pod is gone, or whose pod of the same name no longer has the address.
 */

import { z } from 'zod';
import type { Indeterminate, SourceMeta, Target } from '../../shared/engine/types.ts';
import { ConflictError, KubeApiError } from '../../shared/kube/errors.ts';
import { recordEvent } from '../../shared/kube/events.ts';
import type { KubeClient, KubeReader } from '../../shared/kube/ports.ts';
import { type KubeObject, PODS } from '../../shared/kube/resources.ts';
import { BatchResults } from '../../shared/runtime/batch.ts';
import {
  type BatchItemResult,
  type FunctionContext,
  GUARD_DEFAULTS,
  type Observation,
  type RecheckResult,
  type RemoveResult,
  type TwopassFunction,
} from '../../shared/runtime/function.ts';
import { makeHandler } from '../../shared/runtime/handler.ts';
import { namespacesSetting, pageSizeSetting } from '../../shared/runtime/settings.ts';
import { GROUP, IPPOOLS, networkStatusIps, parsePool, parseReservation, RESERVATIONS } from './model.ts';

export const NAME = 'whereabouts-ips';
/** The pod named by podref is alive but its network-status does not list the address. */
export const NOT_LISTED = {
  alloc: 'IPPoolAllocationNotListed',
  resv: 'OverlappingRangeIPReservationNotListed',
} as const;
const NOT_LISTED_NOTE =
  'the pod named by podref is alive, but its k8s.v1.cni.cncf.io/network-status annotation does not list this address. ' +
  'Either the allocation leaked (the pod got another address, e.g. after a CNI retry) or the annotation lags behind the ' +
  'allocation. No API field tells the two apart: the allocation records a container ID, and a pod shows neither its ' +
  'sandbox ID nor when its annotation was written. So this kind waits longer (kindGrace IPPoolAllocationNotListed / ' +
  'OverlappingRangeIPReservationNotListed, default 1h, against 5m when the pod is gone), and any change to the pod ' +
  'that lists the address rescues it.';
const MIN = 60_000;
const PATCH_ATTEMPTS = 5;

type AllocData = {
  t: 'alloc';
  namespace: string;
  pool: string;
  poolUid: string;
  offset: string;
  id: string;
  podref: string;
  ifname: string;
  ip: string;
};
type ResvData = {
  t: 'resv';
  namespace: string;
  name: string;
  uid: string;
  rv: string;
  podref: string;
  ip: string;
};

export class WhereaboutsNotInstalledError extends Error {
  override name = 'WhereaboutsNotInstalledError';
  readonly call = 'discover whereabouts';
}

type PodView = { uid: string; ips: Set<string> | undefined | string };

/** Whether the pod named by podref uses ip: 'used', 'unused' or a reason it cannot be decided. */
export function judge(
  pods: ReadonlyMap<string, PodView>,
  podref: string,
  ip: string,
): 'used' | 'unused' | { indeterminate: string } {
  const pod = pods.get(podref);
  if (!pod) return 'unused';
  if (pod.ips === undefined) return 'used'; // allocation before evidence: the annotation lags
  if (typeof pod.ips === 'string') return { indeterminate: `pod ${podref}: ${pod.ips}` };
  return pod.ips.has(ip) ? 'used' : 'unused';
}

function podView(o: KubeObject): PodView {
  return { uid: o.metadata.uid, ips: networkStatusIps(o.metadata.annotations) };
}

async function observe(kube: KubeReader, ctx: FunctionContext): Promise<Observation> {
  const pageSize = typeof ctx.settings.pageSize === 'number' ? ctx.settings.pageSize : 500;
  const namespaces = Array.isArray(ctx.settings.namespaces)
    ? new Set(ctx.settings.namespaces.map(String))
    : undefined;
  const inScope = (ns: string) => !namespaces || namespaces.has(ns);
  if (!(await kube.serves(GROUP, 'v1alpha1', 'ippools', ctx.signal))) {
    throw new WhereaboutsNotInstalledError(
      `${GROUP}/v1alpha1 does not serve ippools: is whereabouts installed, and may this identity discover it?`,
    );
  }
  const sources: SourceMeta[] = [];
  // Targets first: pools, then reservations; pods (the evidence) last.
  const pools = await kube.listAll(IPPOOLS, { pageSize, signal: ctx.signal });
  sources.push({
    name: 'ippools',
    role: 'target',
    count: pools.items.length,
    listVersion: pools.resourceVersion,
    pages: pools.pages,
    complete: true,
  });
  const hasResv = await kube.serves(GROUP, 'v1alpha1', RESERVATIONS.plural, ctx.signal);
  const resvs = hasResv
    ? await kube.listAll(RESERVATIONS, { pageSize, signal: ctx.signal })
    : { items: [], resourceVersion: '', pages: 0 };
  sources.push({
    name: 'overlappingrangeipreservations',
    role: 'target',
    count: resvs.items.length,
    ...(hasResv ? { listVersion: resvs.resourceVersion, pages: resvs.pages } : { reason: 'not served' }),
    complete: true,
  });
  const podList = await kube.listAll(PODS, { metadataOnly: true, pageSize, signal: ctx.signal });
  sources.push({
    name: 'pods',
    role: 'evidence',
    count: podList.items.length,
    listVersion: podList.resourceVersion,
    pages: podList.pages,
    complete: true,
  });
  const pods = new Map<string, PodView>();
  for (const p of podList.items) pods.set(`${p.metadata.namespace}/${p.metadata.name}`, podView(p));

  const targets: Target[] = [];
  const used: string[] = [];
  const indeterminate: Indeterminate[] = [];
  const byIp = new Map<string, { id: string; podref: string }[]>(); // allocations by IP, across pools
  const parsedPools = pools.items.map(parsePool);
  for (const pool of parsedPools) {
    for (const a of pool.allocations)
      if (a.ip && !a.problem) byIp.set(a.ip, [...(byIp.get(a.ip) ?? []), { id: a.id, podref: a.podref }]);
  }
  const resvByIp = new Map<string, { containerid: string; podref: string }>();
  const parsedResvs = resvs.items.map(parseReservation);
  for (const r of parsedResvs)
    if (r.ip && !r.problem) resvByIp.set(r.ip.text, { containerid: r.containerid, podref: r.podref });

  for (const pool of parsedPools) {
    if (!inScope(pool.namespace)) continue;
    if (pool.problem)
      ctx.note('pool.unreadable', {
        kind: 'IPPool',
        name: `${pool.namespace}/${pool.name}`,
        reason: pool.problem,
      });
    for (const a of pool.allocations) {
      const key = `${pool.uid}/${a.offset}/${a.id}`;
      const data: AllocData = {
        t: 'alloc',
        namespace: pool.namespace,
        pool: pool.name,
        poolUid: pool.uid,
        offset: a.offset,
        id: a.id,
        podref: a.podref,
        ifname: a.ifname,
        ip: a.ip ?? '',
      };
      // A live pod of that name that does not list the address: its own kind, with a longer grace.
      const kind = pods.has(a.podref) ? NOT_LISTED.alloc : 'IPPoolAllocation';
      targets.push({
        key,
        kind,
        fingerprint: [kind, a.offset, a.id, a.podref, a.ifname].join('|'),
        name: `${pool.namespace}/${pool.name} ${a.ip ?? `offset ${a.offset}`} (${a.podref || '?'})`,
        keep: pool.keep,
        data,
      });
      if (a.problem || !a.ip) {
        indeterminate.push({ key, reason: a.problem ?? 'no address' });
        continue;
      }
      const r = resvByIp.get(a.ip);
      if (r && (r.containerid !== a.id || r.podref !== a.podref)) {
        indeterminate.push({
          key,
          reason: `allocation (${a.id}, ${a.podref}) and reservation (${r.containerid}, ${r.podref}) of ${a.ip} disagree`,
        });
        continue;
      }
      const j = judge(pods, a.podref, a.ip);
      if (j === 'used') used.push(key);
      else if (j !== 'unused') indeterminate.push({ key, reason: j.indeterminate });
    }
  }
  for (const r of parsedResvs) {
    if (!inScope(r.namespace)) continue;
    const data: ResvData = {
      t: 'resv',
      namespace: r.namespace,
      name: r.name,
      uid: r.uid,
      rv: r.resourceVersion,
      podref: r.podref,
      ip: r.ip?.text ?? '',
    };
    const kind = pods.has(r.podref) ? NOT_LISTED.resv : 'OverlappingRangeIPReservation';
    targets.push({
      key: r.uid,
      kind,
      fingerprint: `${kind}|${r.uid}@${r.resourceVersion}`,
      name: `${r.namespace}/${r.name} (${r.podref || '?'})`,
      keep: r.keep,
      data,
    });
    if (r.problem || !r.ip) {
      indeterminate.push({ key: r.uid, reason: r.problem ?? 'no address' });
      continue;
    }
    const allocs = byIp.get(r.ip.text) ?? [];
    if (allocs.some((a) => a.id !== r.containerid || a.podref !== r.podref)) {
      indeterminate.push({ key: r.uid, reason: `reservation and allocation of ${r.ip.text} disagree` });
      continue;
    }
    const j = judge(pods, r.podref, r.ip.text);
    if (j === 'used') used.push(r.uid);
    else if (j !== 'unused') indeterminate.push({ key: r.uid, reason: j.indeterminate });
  }
  return { sources, targets, used, indeterminate };
}

async function podStillUses(
  kube: KubeReader,
  podref: string,
  ip: string,
  signal: AbortSignal,
): Promise<string | undefined> {
  const [ns, name] = podref.split('/') as [string, string];
  const pod = await kube.get(PODS, ns, name, signal);
  if (!pod) return undefined;
  const j = judge(new Map([[podref, podView(pod)]]), podref, ip);
  if (j === 'unused') return undefined;
  return j === 'used' ? `pod ${podref} uses ${ip}` : j.indeterminate;
}

function allocationAt(
  pool: KubeObject,
  offset: string,
): { id?: string; podref?: string; ifname?: string } | undefined {
  const allocs = (
    pool.spec as
      | { allocations?: Record<string, { id?: string; podref?: string; ifname?: string }> }
      | undefined
  )?.allocations;
  return allocs && Object.hasOwn(allocs, offset) ? allocs[offset] : undefined;
}

function sameAllocation(
  a: { id?: string; podref?: string; ifname?: string } | undefined,
  d: AllocData,
): boolean {
  return a !== undefined && a.id === d.id && a.podref === d.podref && (a.ifname ?? '') === d.ifname;
}

async function recheck(kube: KubeReader, target: Target, ctx: FunctionContext): Promise<RecheckResult> {
  const d = target.data as AllocData | ResvData;
  if (d.t === 'alloc') {
    const pool = await kube.get(IPPOOLS, d.namespace, d.pool, ctx.signal);
    if (!pool || pool.metadata.uid !== d.poolUid) return { ok: false, reason: 'pool is gone' };
    if (!sameAllocation(allocationAt(pool, d.offset), d))
      return { ok: false, reason: `allocation at offset ${d.offset} changed` };
  } else {
    const r = await kube.get(RESERVATIONS, d.namespace, d.name, ctx.signal);
    if (!r || r.metadata.uid !== d.uid || r.metadata.resourceVersion !== d.rv)
      return { ok: false, reason: 'reservation changed or is gone' };
  }
  const use = await podStillUses(kube, d.podref, d.ip, ctx.signal);
  return use ? { ok: false, reason: use } : { ok: true };
}

async function remove(kube: KubeClient, target: Target, ctx: FunctionContext): Promise<RemoveResult> {
  const d = target.data as AllocData | ResvData;
  let detail: string;
  if (d.t === 'resv') {
    const out = await kube.deleteWithPreconditions(
      RESERVATIONS,
      d.namespace,
      d.name,
      { uid: d.uid, resourceVersion: d.rv },
      ctx.signal,
    );
    if (out === 'conflict')
      return { outcome: 'skipped', reason: 'precondition failed (409): the reservation changed' };
    if (out === 'gone') return { outcome: 'gone' };
    detail = `reservation ${d.namespace}/${d.name} deleted`;
  } else {
    // A JSON Patch whose first op tests the pool's resourceVersion; on a conflict, re-decide from the fresh pool.
    let done = false;
    for (let attempt = 1; attempt <= PATCH_ATTEMPTS && !done; attempt++) {
      const pool = await kube.get(IPPOOLS, d.namespace, d.pool, ctx.signal);
      if (!pool || pool.metadata.uid !== d.poolUid) return { outcome: 'gone', detail: 'pool is gone' };
      if (!sameAllocation(allocationAt(pool, d.offset), d))
        return { outcome: 'skipped', reason: `allocation at offset ${d.offset} changed in the fresh pool` };
      try {
        await kube.jsonPatch(
          IPPOOLS,
          d.namespace,
          d.pool,
          [
            { op: 'test', path: '/metadata/resourceVersion', value: pool.metadata.resourceVersion },
            { op: 'remove', path: `/spec/allocations/${d.offset}` },
          ],
          ctx.signal,
        );
        done = true;
      } catch (err) {
        const conflict = err instanceof ConflictError || (err instanceof KubeApiError && err.status === 422);
        if (!conflict) throw err;
        if (attempt === PATCH_ATTEMPTS)
          return { outcome: 'skipped', reason: `pool kept changing (${PATCH_ATTEMPTS} conflicts)` };
      }
    }
    detail = `allocation ${d.ip} (offset ${d.offset}, container ${d.id.slice(0, 12)}) removed from IPPool ${d.namespace}/${d.pool}`;
  }
  await recordEvent(
    kube,
    d.namespace,
    d.t === 'alloc'
      ? {
          apiVersion: `${GROUP}/v1alpha1`,
          kind: 'IPPool',
          name: d.pool,
          namespace: d.namespace,
          uid: d.poolUid,
        }
      : {
          apiVersion: `${GROUP}/v1alpha1`,
          kind: 'OverlappingRangeIPReservation',
          name: d.name,
          namespace: d.namespace,
          uid: d.uid,
        },
    'WhereaboutsAddressReclaimed',
    `twopass reclaimed ${d.ip} of ${d.podref}: ${detail}`,
    'Normal',
    ctx.now,
    ctx.signal,
  ).catch((err) => ctx.note('event.failed', { name: d.ip, error: (err as Error).message }));
  return { outcome: 'deleted', detail };
}

/**
 * The confirmed allocations of one IPPool, together: one fresh read of the pool and one
 * fresh list of the pods they name re-check every allocation; one JSON Patch that tests
 * the pool's resourceVersion removes those still unused (a re-check that finds use skips
 * just that one); a conflict re-reads and re-checks, never retries blindly; a read-back
 * confirms; one Event for the pool.
 */
async function removeBatch(
  reader: KubeReader,
  kube: KubeClient,
  targets: readonly Target[],
  ctx: FunctionContext,
): Promise<BatchItemResult[]> {
  const allocs = targets.map((t) => ({ t, d: t.data as AllocData }));
  const d0 = allocs[0]!.d;
  const results = new BatchResults(targets);
  const skip = (key: string, reason: string) => results.skip(key, reason);
  const namespaces = [...new Set(allocs.map(({ d }) => d.podref.split('/')[0]!))].sort();
  for (let attempt = 1; attempt <= PATCH_ATTEMPTS; attempt++) {
    const pool = await reader.get(IPPOOLS, d0.namespace, d0.pool, ctx.signal);
    if (!pool || pool.metadata.uid !== d0.poolUid) {
      results.rest((key) => ({ key, outcome: 'gone', detail: 'pool is gone' }));
      break;
    }
    // The evidence, fresh and complete: the pods of every namespace the allocations name.
    const pods = new Map<string, PodView>();
    for (const ns of namespaces)
      for (const p of (await reader.listAll(PODS, { namespace: ns, metadataOnly: true, signal: ctx.signal }))
        .items)
        pods.set(`${p.metadata.namespace}/${p.metadata.name}`, podView(p));
    const removing: { t: Target; d: AllocData }[] = [];
    for (const { t, d } of allocs) {
      if (results.has(t.key)) continue;
      if (!sameAllocation(allocationAt(pool, d.offset), d)) {
        skip(t.key, `re-check: allocation at offset ${d.offset} changed in the fresh pool`);
        continue;
      }
      const j = judge(pods, d.podref, d.ip);
      if (j !== 'unused') {
        skip(t.key, `re-check: ${j === 'used' ? `pod ${d.podref} uses ${d.ip}` : j.indeterminate}`);
        continue;
      }
      removing.push({ t, d });
    }
    if (removing.length === 0) break;
    try {
      await kube.jsonPatch(
        IPPOOLS,
        d0.namespace,
        d0.pool,
        [
          { op: 'test', path: '/metadata/resourceVersion', value: pool.metadata.resourceVersion },
          ...removing.map(({ d }) => ({ op: 'remove' as const, path: `/spec/allocations/${d.offset}` })),
        ],
        ctx.signal,
      );
    } catch (err) {
      const conflict = err instanceof ConflictError || (err instanceof KubeApiError && err.status === 422);
      if (conflict && attempt < PATCH_ATTEMPTS) continue;
      for (const { t } of removing)
        results.set(
          conflict
            ? { key: t.key, outcome: 'skipped', reason: `pool kept changing (${PATCH_ATTEMPTS} conflicts)` }
            : { key: t.key, outcome: 'failed', error: (err as Error).message },
        );
      break;
    }
    // Read back: a success that did not happen is a failure, never "removed".
    const after = await reader.get(IPPOOLS, d0.namespace, d0.pool, ctx.signal);
    const removed: string[] = [];
    for (const { t, d } of removing) {
      if (after && after.metadata.uid === d0.poolUid && sameAllocation(allocationAt(after, d.offset), d))
        results.set({
          key: t.key,
          outcome: 'failed',
          error: 'the patch answered success, but a read-back still finds the allocation',
        });
      else {
        removed.push(d.ip);
        results.set({
          key: t.key,
          outcome: 'deleted',
          detail: `allocation ${d.ip} (offset ${d.offset}, container ${d.id.slice(0, 12)}) removed from IPPool ${d.namespace}/${d.pool}`,
        });
      }
    }
    if (removed.length > 0)
      await recordEvent(
        kube,
        d0.namespace,
        {
          apiVersion: `${GROUP}/v1alpha1`,
          kind: 'IPPool',
          name: d0.pool,
          namespace: d0.namespace,
          uid: d0.poolUid,
        },
        'WhereaboutsAddressReclaimed',
        `twopass removed ${removed.length} allocation${removed.length === 1 ? '' : 's'} of pods that are gone or no longer hold the address: ${removed.join(', ')}`,
        'Normal',
        ctx.now,
        ctx.signal,
      ).catch((err) =>
        ctx.note('event.failed', {
          kind: 'IPPool',
          name: `${d0.namespace}/${d0.pool}`,
          error: (err as Error).message,
        }),
      );
    break;
  }
  return results.all('the pool kept changing');
}

async function confirmGone(kube: KubeReader, target: Target, ctx: FunctionContext): Promise<boolean> {
  const d = target.data as AllocData | ResvData;
  if (d.t === 'resv') {
    const r = await kube.get(RESERVATIONS, d.namespace, d.name, ctx.signal);
    return !r || r.metadata.uid !== d.uid;
  }
  const pool = await kube.get(IPPOOLS, d.namespace, d.pool, ctx.signal);
  return !pool || pool.metadata.uid !== d.poolUid || !sameAllocation(allocationAt(pool, d.offset), d);
}

export const whereaboutsIpsSettings = z
  .object({
    /** Only pools and reservations of these namespaces are targets. */
    namespaces: namespacesSetting.optional(),
    pageSize: pageSizeSetting.optional(),
  })
  .strict();

export const whereaboutsIps: TwopassFunction<KubeReader, KubeClient> = {
  name: NAME,
  settingsSchema: whereaboutsIpsSettings,
  description:
    'whereabouts IPPool allocations and OverlappingRangeIPReservations whose pod is gone or no longer has the address',
  defaults: {
    schedule: '*/5 * * * *',
    graceMs: 5 * MIN,
    kindGraceMs: { [NOT_LISTED.alloc]: 60 * MIN, [NOT_LISTED.resv]: 60 * MIN },
    ...GUARD_DEFAULTS,
  },
  observe,
  recheck,
  remove,
  confirmGone,
  // The allocations of one pool are removed together, in one patch (reservations one by one).
  batchOf: (t) =>
    (t.data as AllocData | ResvData).t === 'alloc' ? (t.data as AllocData).poolUid : undefined,
  kindNotes: { [NOT_LISTED.alloc]: NOT_LISTED_NOTE, [NOT_LISTED.resv]: NOT_LISTED_NOTE },
  removeBatch,
};

export default whereaboutsIps;

/** For FaaS runtimes: `handler({ apply, dryRun, record, config })` returns the run summary. */
export const handler = makeHandler(whereaboutsIps);
