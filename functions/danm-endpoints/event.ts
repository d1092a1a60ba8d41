/** The Kubernetes Event of a danm-endpoints batch: one per network. */
import type { EventNote, Removed } from '../../shared/contract/index.ts';
import { networkName } from './clears.ts';
import type { BitData, EpData } from './data.ts';

/** One Event per batch, on the network: the DanmEps deleted and the addresses cleared. */
export function networkEvent(removed: readonly Removed<EpData | BitData>[]): EventNote | undefined {
  const d0 = removed[0]?.target.data;
  if (!d0) return undefined;
  const eps: EpData[] = [];
  const bits: BitData[] = [];
  for (const { target } of removed)
    if ('podUID' in target.data) eps.push(target.data);
    else bits.push(target.data);
  const uid = bits[0]?.uid;
  const name = 'podUID' in d0 ? d0.network : d0.name;
  const ns = d0.networkType === 'ClusterNetwork' ? undefined : d0.namespace;
  const parts: string[] = [];
  if (eps.length)
    parts.push(
      `deleted ${eps.length} DanmEp${eps.length === 1 ? '' : 's'} of gone pods (${eps.map((e) => `${e.name} of Pod ${e.pod}, UID ${e.podUID}`).join('; ')})`,
    );
  if (bits.length)
    parts.push(
      `cleared ${bits.length} leaked address${bits.length === 1 ? '' : 'es'} held by no DanmEp (${bits.map((b) => b.address).join(', ')})`,
    );
  return {
    // An Event about a cluster-scoped object lives in `default` (the API server refuses another
    // namespace with 422: involvedObject.namespace "" does not match).
    namespace: ns ?? 'default',
    involved: {
      apiVersion: `${d0.group}/v1`,
      kind: d0.networkType,
      name,
      ...(ns ? { namespace: ns } : {}),
      ...(uid ? { uid } : {}),
    },
    reason: eps.length ? 'DanmEndpointReclaimed' : 'DanmAddressReclaimed',
    message: `twopass ${parts.join('; and ')} in ${networkName(d0)}`,
  };
}
