import { defineFunction, GUARD_DEFAULTS, MINUTE } from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { bitKind } from './bits.ts';
import { danmEndpointsSettings, endpointKind } from './endpoint.ts';
import { type Kinds, observe } from './observe.ts';

export { detectGroup } from './evidence.ts';
export const NAME = 'danm-endpoints';

export const danmEndpoints = defineFunction<typeof danmEndpointsSettings, KubeReader, KubeReadWriter, Kinds>({
  name: NAME,
  description:
    'DanmEps whose Pod (by UID) is gone, the IPs they held, and leaked bits in DANM network bitmaps',
  settings: danmEndpointsSettings,
  defaults: { schedule: '*/5 * * * *', graceMs: 5 * MINUTE, ...GUARD_DEFAULTS },
  access: {
    cluster: [
      // either API group DANM serves (settings.group, or the one the cluster has)
      { apiGroups: ['danm.k8s.io', 'danm.io'], resources: ['danmeps'], verbs: ['list', 'get', 'delete'] },
      {
        apiGroups: ['danm.k8s.io', 'danm.io'],
        resources: ['danmnets', 'tenantnetworks', 'clusternetworks'],
        // watch: a leaked bit's history is replayed from the server's watch cache (decision 0016)
        verbs: ['list', 'get', 'watch', 'update'],
      },
      { apiGroups: [''], resources: ['pods'], verbs: ['list', 'get'] },
    ],
  },
  kinds: {
    DanmEp: endpointKind,
    // Leaked bits of one network are cleared together, in one write (DanmEps go one by one).
    DanmBit: { ...bitKind, graceMs: 10 * MINUTE },
  },
  observe,
});

export { danmEndpointsSettings } from './endpoint.ts';
