/** Worlds on the real Neutron: what ch-k8s-lbaas creates for a Service, made through the API as the project's user. */
import { CONTROLLER_DESCRIPTION, MANAGED_TAG } from '../../functions/lbaas-ports/index.ts';
import { passwordToken, type RealOpenStack } from './real-openstack.ts';

export function realWorld(os: RealOpenStack | undefined) {
  /** Neutron as the project's user: what ch-k8s-lbaas does for a Service. */
  // One token for a minute (a password token costs Keystone a bcrypt check: seeding 1,000
  // ports with a token per call spent most of its time there).
  let cached: { token: Promise<string>; at: number } | undefined;
  const cachedToken = () => {
    if (!cached || Date.now() - cached.at > 60_000)
      cached = {
        token: passwordToken(os!.authUrl, os!.user.name, os!.user.password, os!.project.name),
        at: Date.now(),
      };
    return cached.token;
  };
  async function neutron(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const token = await cachedToken();
    const res = await fetch(`${os!.neutronUrl}/v2.0${path}`, {
      method,
      headers: { 'x-auth-token': token, 'content-type': 'application/json', accept: 'application/json' },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    if (res.status >= 300 && res.status !== 404)
      throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
    return res.status === 404
      ? { notFound: true }
      : text
        ? (JSON.parse(text) as Record<string, unknown>)
        : {};
  }

  async function controllerPort(tags: string[] = [MANAGED_TAG], withFip = true) {
    const port = (
      await neutron('POST', '/ports', {
        port: {
          network_id: os!.networkId,
          // as ch-k8s-lbaas makes them: no name, no owner, no port security, no security groups
          description: CONTROLLER_DESCRIPTION,
          port_security_enabled: false,
        },
      })
    ).port as { id: string; fixed_ips: { ip_address: string }[] };
    await neutron('PUT', `/ports/${port.id}/tags`, { tags });
    if (!withFip) return { port };
    const fip = (
      await neutron('POST', '/floatingips', {
        floatingip: {
          floating_network_id: os!.externalNetworkId,
          port_id: port.id,
          description: CONTROLLER_DESCRIPTION,
        },
      })
    ).floatingip as { id: string; floating_ip_address: string };
    await neutron('PUT', `/floatingips/${fip.id}/tags`, { tags: [MANAGED_TAG] });
    return { port, fip };
  }

  const exists = async (what: 'ports' | 'floatingips', id: string) =>
    !(await neutron('GET', `/${what}/${id}`)).notFound;

  return { neutron, controllerPort, exists };
}
