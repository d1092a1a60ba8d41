/**
 * Baseline: ch-k8s-lbaas's cleanup. "In use" is an in-memory port map filled by
 * syncing Services one by one from a queue; after a restart the map is empty
 * and the cleanup runs before every Service has been synced again.
 */
import { MANAGED_TAG, PORT_ANNOTATION } from '../../../functions/lbaas-ports/index.ts';
import { SERVICES } from '../../../shared/kube/resources.ts';
import type { Cleaner } from '../harness.ts';
import type { LbaasWorld } from '../worlds/lbaas.ts';

export function lbaasMemoryCleaner(w: LbaasWorld): Cleaner {
  let used = new Set<string>();
  let queue: string[] = [];
  let runs = 0;
  async function pass(): Promise<void> {
    runs++;
    if (runs % 3 === 1) {
      // a restart: memory empty, every Service queued for a re-sync
      used = new Set();
      queue = (await w.kube.listAll(SERVICES, {})).items.map((s) => s.metadata.name);
    }
    const name = queue.shift(); // one Service synced per cycle, then the barrier is (wrongly) gone
    if (name) {
      const svc = await w.kube.get(SERVICES, 'default', name);
      const port = svc?.metadata.annotations?.[PORT_ANNOTATION];
      if (port) used.add(port);
    }
    for (const p of (await w.neutron.listPorts({ tags: [MANAGED_TAG] })).items) {
      if (!used.has(p.id)) {
        for (const f of (await w.neutron.listFloatingIps({ tags: [MANAGED_TAG] })).items)
          if (f.port_id === p.id) await w.neutron.deleteFloatingIp(f.id);
        await w.neutron.deletePort(p.id);
      }
    }
  }
  return {
    name: 'in-memory port map with a start-up barrier (ch-k8s-lbaas)',
    run: () => pass().catch(() => undefined),
  };
}
