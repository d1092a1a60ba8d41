/** Interceptors of lbaas-ports' Neutron writer, for faults that must happen at one exact call. */
import type { AnyFunction, ConnectContext } from '../../shared/contract/index.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { NeutronClient } from '../../shared/openstack/neutron.ts';
import { systemTime } from '../../shared/time.ts';

/**
 * The function with one Neutron call of its ports preceded, once per port, by `before(portId)`:
 * a change made at one exact moment, with no sleeping.
 */
function beforeNeutron(
  fn: AnyFunction,
  side: 'reader' | 'writer',
  method: 'getPort' | 'deletePort',
  before: (portId: string) => Promise<void>,
): AnyFunction {
  const done = new Set<string>();
  return {
    ...fn,
    async connect(ctx: ConnectContext) {
      const ports = await fn.connect!(ctx);
      const real = (ports[side] as { neutron: NeutronClient }).neutron;
      const neutron = Object.create(real) as NeutronClient;
      const call = real[method].bind(real) as (id: string, ...rest: unknown[]) => Promise<unknown>;
      (neutron as unknown as Record<string, unknown>)[method] = async (id: string, ...rest: unknown[]) => {
        if (!done.has(id)) {
          done.add(id);
          await before(id);
        }
        return call(id, ...rest);
      };
      return { ...ports, [side]: { ...(ports[side] as object), neutron } };
    },
  };
}

/** A change made after the re-check and before the DELETE (what no re-check can see). */
export const changedBeforeDelete = (fn: AnyFunction, before: (portId: string) => Promise<void>) =>
  beforeNeutron(fn, 'writer', 'deletePort', before);

/**
 * Before the act phase's re-check reads the port: after the Services list of its group and
 * before the controller is read for its DELETE.
 */
export const beforeRecheck = (fn: AnyFunction, before: (portId: string) => Promise<void>) =>
  beforeNeutron(fn, 'reader', 'getPort', before);

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
