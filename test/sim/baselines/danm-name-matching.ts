/**
 * Baseline: a DANM-cleaner-like reconciler. One snapshot, pods listed first,
 * DanmEps matched to pods by name, no grace window, no re-check, no
 * precondition; the bit of a deleted DanmEp is cleared without asking who holds it.
 */
import { Bitmap } from '../../../functions/danm-endpoints/bitmap.ts';
import type { KubeObject } from '../../../shared/kube/resources.ts';
import { PODS } from '../../../shared/kube/resources.ts';
import { parseAddress, parseCidr } from '../../../shared/net/ip.ts';
import { R } from '../../../shared/sandbox/scenarios/danm.ts';
import type { Cleaner } from '../harness.ts';
import type { SimKube } from '../simkube.ts';

export function danmNameMatchingCleaner(kube: SimKube): Cleaner {
  async function pass(): Promise<void> {
    const pods = (await kube.listAll(PODS, {})).items;
    const eps = (await kube.listAll(R.danmeps, {})).items;
    const names = new Set(pods.map((p) => `${p.metadata.namespace}/${p.metadata.name}`));
    for (const ep of eps) {
      const spec = ep.spec as {
        Pod: string;
        NetworkName: string;
        apiType?: 'DanmNet' | 'TenantNetwork' | 'ClusterNetwork';
        Interface: { Address: string };
      };
      if (names.has(`${ep.metadata.namespace}/${spec.Pod}`)) continue;
      await kube.delete(R.danmeps, ep.metadata.namespace, ep.metadata.name);
      const type = spec.apiType ?? 'DanmNet';
      const netNs = type === 'ClusterNetwork' ? undefined : ep.metadata.namespace;
      const net = await kube.get(R[type], netNs, spec.NetworkName);
      if (!net) continue;
      const opts = (net.spec as { Options: { cidr: string; alloc: string } }).Options;
      const cidr = parseCidr(opts.cidr)!;
      const a = parseAddress(spec.Interface.Address.split('/')[0]!)!;
      const bm = Bitmap.decode(opts.alloc, cidr) as Bitmap;
      const alloc = bm.with(Number(a.value - cidr.network), false).encode();
      await kube.replace(R[type], {
        ...net,
        spec: { ...(net.spec as object), Options: { ...opts, alloc } },
      } as KubeObject);
    }
  }
  return {
    name: 'name-matching, single snapshot (DANM cleaner)',
    run: async () => {
      await pass().catch(() => undefined); // a failed call ends the pass, as a crash would
    },
  };
}
