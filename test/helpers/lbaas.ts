/** Interceptors of lbaas-ports' Neutron writer, for faults that must happen at one exact call. */
import type { AnyFunction, ConnectContext } from '../../shared/contract/index.ts';
import type { NeutronClient } from '../../shared/openstack/neutron.ts';

/**
 * The function with its writer's `deletePort` preceded, once per port, by `before(portId)`:
 * a change made after the re-check and before the DELETE (what no re-check can see).
 */
export function changedBeforeDelete(fn: AnyFunction, before: (portId: string) => Promise<void>): AnyFunction {
  const done = new Set<string>();
  return {
    ...fn,
    async connect(ctx: ConnectContext) {
      const ports = await fn.connect!(ctx);
      const real = ports.writer.neutron as NeutronClient;
      const neutron = Object.create(real) as NeutronClient;
      neutron.deletePort = async (id, revision, signal) => {
        if (!done.has(id)) {
          done.add(id);
          await before(id);
        }
        return real.deletePort(id, revision, signal);
      };
      return { ...ports, writer: { ...ports.writer, neutron } };
    },
  };
}
