/**
 * The DanmEp kind: a DanmEp whose Pod (by UID) is gone. Deleted with preconditions; then
 * the addresses it held are cleared in its network's bitmap, in the network's batch
 * (`batch.ts`): one write for every DanmEp and leaked bit of the network.
 */
import { type KindSpec, kubeObject } from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { networkBatch } from './batch.ts';
import { type EpData, epData, type Settings } from './data.ts';
import { networkEvent } from './event.ts';
import { danmResources, networkId } from './model.ts';
import { restoreEndpoint } from './restore.ts';

export const endpointKind: KindSpec<EpData, KubeReader, KubeReadWriter, Settings> = {
  data: epData,
  unused: 'the Pod it was created for (by UID) is gone',
  removal:
    "DELETE the DanmEp (preconditions: uid, resourceVersion), then clear its addresses in its network's allocation bitmap (one write per network and run) unless another DanmEp or a pod being set up holds them",
  touches: (d) => {
    const r = danmResources(d.group);
    return [
      { object: kubeObject(r.danmeps, d.namespace, d.name) },
      { object: kubeObject(r[d.networkType], d.namespace, d.network) },
    ];
  },
  event: networkEvent,
  // The DanmEps and leaked bits of one network are removed together (one write of its bitmap).
  batch: networkBatch,
  restore: restoreEndpoint,
  place: (d) => networkId(d.networkType, d.namespace, d.network),
};

export { danmEndpointsSettings, type EpData, type Settings } from './data.ts';
