/** Baseline: early whereabouts' reconciler. Pods listed before pools, allocations matched by podref. */
import { IPPOOLS } from '../../../functions/whereabouts-ips/model.ts';
import type { KubeObject } from '../../../shared/kube/resources.ts';
import { PODS } from '../../../shared/kube/resources.ts';
import type { Cleaner } from '../harness.ts';
import type { SimKube } from '../simkube.ts';

export function podsBeforePoolsCleaner(kube: SimKube): Cleaner {
  async function pass(): Promise<void> {
    const pods = new Set(
      (await kube.listAll(PODS, {})).items.map((p) => `${p.metadata.namespace}/${p.metadata.name}`),
    );
    for (const pool of (await kube.listAll(IPPOOLS, {})).items) {
      const allocs = (pool.spec as { allocations: Record<string, { podref: string }> }).allocations;
      const keep = Object.fromEntries(Object.entries(allocs).filter(([, a]) => pods.has(a.podref)));
      if (Object.keys(keep).length === Object.keys(allocs).length) continue;
      const fresh = (await kube.get(IPPOOLS, pool.metadata.namespace, pool.metadata.name))!;
      await kube.replace(IPPOOLS, {
        ...fresh,
        spec: { ...(fresh.spec as object), allocations: keep },
      } as KubeObject);
    }
  }
  return {
    name: 'pods before pools, by podref (early whereabouts)',
    run: () => pass().catch(() => undefined),
  };
}
