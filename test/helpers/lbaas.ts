/** Interceptors of lbaas-ports' Neutron writer, for faults that must happen at one exact call. */
import type { AnyFunction, ConnectContext } from '../../shared/contract/index.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { NeutronClient } from '../../shared/openstack/neutron.ts';
import { systemTime } from '../../shared/time.ts';

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

/**
 * The function with its reader's `getPort` preceded, once per port, by `before(portId)`: the
 * act phase's re-check reads the port first, so this runs after the Services list of its
 * group and before the controller is read for its DELETE.
 */
export function beforeRecheck(fn: AnyFunction, before: (portId: string) => Promise<void>): AnyFunction {
  const done = new Set<string>();
  return {
    ...fn,
    async connect(ctx: ConnectContext) {
      const ports = await fn.connect!(ctx);
      const real = ports.reader.neutron as NeutronClient;
      const neutron = Object.create(real) as NeutronClient;
      neutron.getPort = async (id, signal) => {
        if (!done.has(id)) {
          done.add(id);
          await before(id);
        }
        return real.getPort(id, signal);
      };
      return { ...ports, reader: { ...ports.reader, neutron } };
    },
  };
}

/** A Neutron client with the credentials of `env` (OS_CLOUD + OS_CLIENT_CONFIG_FILE), as twopass builds it. */
export function neutronFor(env: Readonly<Record<string, string | undefined>>): {
  neutron: NeutronClient;
  close: () => Promise<void>;
} {
  const cloud = loadCloudConfig(env);
  const http = new Http({ timeoutMs: 30_000, time: systemTime });
  const neutron = new NeutronClient(new KeystoneAuth(cloud, http, () => Date.now()), http);
  return { neutron, close: () => http.close() };
}
