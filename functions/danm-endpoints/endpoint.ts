/**
 * The DanmEp kind: a DanmEp whose Pod (by UID) is gone. Deleted with preconditions; then
 * the addresses it held are cleared in its network's bitmap, in the network's batch
 * (`batch.ts`): one write for every DanmEp and leaked bit of the network.
 */
import { z } from 'zod';
import {
  describeValue,
  type KindSpec,
  kubeObject,
  namespacesSetting,
  pageSizeSetting,
} from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { networkBatch } from './batch.ts';
import { networkEvent } from './event.ts';
import { danmResources, GROUPS, networkId } from './model.ts';
import { restoreEndpoint } from './restore.ts';

/** The settings of danm-endpoints (`functions.danm-endpoints.settings`). */
export const danmEndpointsSettings = z
  .object({
    namespaces: namespacesSetting
      .optional()
      .describe(
        'only DanmEps and networks of these namespaces are targets; ClusterNetworks always are (default: all)',
      ),
    group: z
      .enum(GROUPS, { error: (i) => `expected one of ${GROUPS.join(', ')}, got ${describeValue(i.input)}` })
      .optional()
      .describe('the DANM API group (default: detected)'),
    pageSize: pageSizeSetting.default(500).describe('items per list page'),
    serverSkewSeconds: z
      .number({ error: (i) => `expected a number of seconds, got ${describeValue(i.input)}` })
      .int()
      .min(1)
      .max(3600)
      .default(60)
      .describe(
        "how far apart the API servers' clocks may be: a pod counts as created after its network's last write (so its CNI ADD set no bit there) only when later by more than this",
      ),
  })
  .strict();

export type Settings = z.output<typeof danmEndpointsSettings>;

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
