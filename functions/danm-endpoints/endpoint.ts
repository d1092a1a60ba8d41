/**
 * The DanmEp kind: a DanmEp whose Pod (by UID) is gone. Deleted with preconditions; then
 * the addresses it held are cleared in its network's bitmap, each against a fresh read
 * of the network and of who else may hold the bit.
 */
import { z } from 'zod';
import { deleteAsObserved, type KindSpec } from '../../shared/contract/index.ts';
import { ConflictError } from '../../shared/kube/errors.ts';
import type { KubeClient, KubeReader } from '../../shared/kube/ports.ts';
import { PODS } from '../../shared/kube/resources.ts';
import { parseAddress } from '../../shared/net/ip.ts';
import { freshEvidence, poolOf, readNetwork, withBitmaps } from './evidence.ts';
import { bitIndex, clearable, danmResources } from './model.ts';

export type Settings = Readonly<{
  namespaces?: readonly string[] | undefined;
  group?: string | undefined;
  pageSize: number;
}>;

export const networkType = z.enum(['DanmNet', 'TenantNetwork', 'ClusterNetwork']);

export const epData = z.object({
  group: z.string().min(1),
  namespace: z.string().min(1),
  name: z.string().min(1),
  uid: z.string().min(1),
  rv: z.string().min(1),
  pod: z.string().min(1),
  podUID: z.string().min(1),
  networkType,
  network: z.string().min(1),
  v4: z.string().optional(),
  v6: z.string().optional(),
});
export type EpData = z.output<typeof epData>;

const CLEAR_ATTEMPTS = 5;

type Cleared = { address: string; outcome: string };

/** Clears one address bit with resourceVersion and bounded conflict retries; every rule re-checked on the fresh read. */
async function clearAddress(
  kube: KubeClient,
  d: EpData,
  family: 4 | 6,
  text: string,
  signal: AbortSignal,
): Promise<Cleared> {
  const addr = parseAddress(text.split('/')[0]!);
  if (!addr) return { address: text, outcome: 'unparsable, left set' };
  for (let attempt = 1; attempt <= CLEAR_ATTEMPTS; attempt++) {
    const net = await readNetwork(kube, d.group, d.networkType, d.namespace, d.network, signal);
    if (!net) return { address: text, outcome: 'network gone, nothing to clear' };
    if (net.problem) return { address: text, outcome: `network unreadable (${net.problem}), left set` };
    const pool = poolOf(net, family);
    const idx = pool ? bitIndex(pool, addr) : undefined;
    if (!pool || idx === undefined)
      return { address: text, outcome: 'outside the network range, left alone' };
    if (!pool.bitmap.isSet(idx)) return { address: text, outcome: 'already clear' };
    if (!clearable(pool, idx)) return { address: text, outcome: 'reserved, left set' };
    const holder = (await freshEvidence(kube, d.group, net, signal))(family, idx, d.uid);
    if (holder) return { address: text, outcome: `${holder}, left set` };
    const alloc = pool.bitmap.with(idx, false).encode();
    try {
      await kube.replace(
        danmResources(d.group)[d.networkType],
        withBitmaps(net, family === 4 ? alloc : undefined, family === 6 ? alloc : undefined),
        signal,
      );
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err;
      if (attempt < CLEAR_ATTEMPTS) continue;
      return {
        address: text,
        outcome: `left set after ${CLEAR_ATTEMPTS} conflicts (a later run reclaims it as a leaked bit)`,
      };
    }
    // A success that did not happen is caught here, not reported as "cleared".
    const after = await readNetwork(kube, d.group, d.networkType, d.namespace, d.network, signal);
    const afterPool = after && !after.problem ? poolOf(after, family) : undefined;
    if (
      after?.uid === net.uid &&
      afterPool?.bitmap.isSet(idx) &&
      after.resourceVersion === net.resourceVersion
    )
      return {
        address: text,
        outcome:
          'left set: the update answered success, but a read-back finds the network unchanged (a later run reclaims it as a leaked bit)',
      };
    return { address: addr.text, outcome: 'cleared' };
  }
  return { address: text, outcome: 'left set' };
}

export const endpointKind: KindSpec<EpData, KubeReader, KubeClient, Settings> = {
  data: epData,
  unused: 'the Pod it was created for (by UID) is gone',
  removal:
    "DELETE the DanmEp (preconditions: uid, resourceVersion), then clear its addresses in its network's allocation bitmap unless another DanmEp or a pod being set up holds them",
  async recheck(kube, { data: d }, ctx) {
    const ep = await kube.get(danmResources(d.group).danmeps, d.namespace, d.name, ctx.signal);
    if (!ep) return { ok: false, reason: 'DanmEp is already gone' };
    if (ep.metadata.uid !== d.uid || ep.metadata.resourceVersion !== d.rv)
      return { ok: false, reason: 'DanmEp changed since the snapshot' };
    const pod = await kube.get(PODS, d.namespace, d.pod, ctx.signal);
    if (pod && pod.metadata.uid === d.podUID)
      return { ok: false, reason: `Pod ${d.namespace}/${d.pod} with UID ${d.podUID} exists` };
    return { ok: true };
  },
  async remove(kube, { data: d }, ctx) {
    const out = await deleteAsObserved(kube, danmResources(d.group).danmeps, d, 'the DanmEp', ctx.signal);
    if (out.outcome === 'skipped') return out;
    // Gone before us: whoever deleted it owns its bits; clearing them again could free an address twice.
    if (out.outcome === 'gone')
      return {
        outcome: 'gone',
        detail: 'DanmEp was already gone; its bits are left to the next observation',
      };
    // The DanmEp is gone now: a failure to clear an address leaks it (a later run reclaims it as a
    // leaked bit); it does not make the deletion fail.
    const cleared: Cleared[] = [];
    for (const [family, text] of [
      [4, d.v4],
      [6, d.v6],
    ] as const) {
      if (!text) continue;
      cleared.push(
        await clearAddress(kube, d, family, text, ctx.signal).catch((err: Error) => ({
          address: text,
          outcome: `left set: ${err.message}`,
        })),
      );
    }
    const addresses = cleared.map((c) => `${c.address}: ${c.outcome}`).join(', ');
    return {
      outcome: 'deleted',
      detail: `DanmEp ${d.namespace}/${d.name} deleted; ${addresses || 'no address'}`,
    };
  },
  async confirmGone(kube, { data: d }, ctx) {
    const ep = await kube.get(danmResources(d.group).danmeps, d.namespace, d.name, ctx.signal);
    return !ep || ep.metadata.uid !== d.uid;
  },
  event(removed) {
    const { target, detail } = removed[0]!;
    const d = target.data;
    return {
      namespace: d.namespace,
      involved: {
        apiVersion: `${d.group}/v1`,
        kind: 'DanmEp',
        name: d.name,
        namespace: d.namespace,
        uid: d.uid,
      },
      reason: 'DanmEndpointReclaimed',
      message: `twopass deleted DanmEp ${d.name} of Pod ${d.pod} (UID ${d.podUID}, gone); ${detail?.split('; ').slice(1).join('; ') ?? ''}`,
    };
  },
};
