/**
 * Neutron resources back from their tombstones: a port with its fixed IPs, name, tags and
 * owner, and a floating IP with its address (on the new port when it had one). Only when
 * every address is free now: each is looked up first, and Neutron's own 409 on create
 * (an address taken in between) refuses too. New objects get new ids, which are reported.
 */
import type { FloatingIp, NeutronClient, Port } from './neutron.ts';

export type NeutronRestore =
  | { outcome: 'restored' | 'ready'; detail: string; ids?: Record<string, string> }
  | { outcome: 'refused'; reason: string };

type FullPort = Port & { network_id?: string };
type FullFip = FloatingIp & { floating_network_id?: string };

const keptTags = (tags: readonly string[] | undefined) => (tags ?? []).filter((t) => t !== 'twopass.io/keep');

async function free(
  n: NeutronClient,
  port: FullPort | undefined,
  fip: FullFip | undefined,
  signal: AbortSignal,
) {
  for (const f of port?.fixed_ips ?? []) {
    const by = await n.addressHolder('fixed', f.ip_address, signal);
    if (by) return `${f.ip_address} is held by port ${by} now`;
  }
  if (fip?.floating_ip_address) {
    const by = await n.addressHolder('floating', fip.floating_ip_address, signal);
    if (by) return `floating IP address ${fip.floating_ip_address} is allocated again (${by})`;
  }
  return undefined;
}

/**
 * Choosing a floating IP's address is an admin's in Neutron's default policy
 * (`create_floatingip:floating_ip_address`): said before anything is created.
 */
export async function fipCredentials(n: NeutronClient, signal: AbortSignal): Promise<string | undefined> {
  const roles = await n.roles(signal);
  if (roles.includes('admin')) return undefined;
  return `restoring a floating IP with its address needs an admin's credentials (Neutron's default policy create_floatingip:floating_ip_address); these carry the roles ${roles.join(', ') || '(none)'}: nothing was created; restore with an admin's cloud (OS_CLOUD)`;
}

/** A port (and its floating IP, if it had one) created again with the same addresses. */
export async function restorePort(
  n: NeutronClient,
  port: FullPort,
  fip: FullFip | undefined,
  ctx: Readonly<{ apply: boolean; signal: AbortSignal }>,
): Promise<NeutronRestore> {
  if (!port.network_id)
    return { outcome: 'refused', reason: "the tombstone does not name the port's network" };
  if (fip?.floating_ip_address) {
    const short = await fipCredentials(n, ctx.signal);
    if (short) return { outcome: 'refused', reason: short };
  }
  const taken = await free(n, port, fip, ctx.signal);
  if (taken) return { outcome: 'refused', reason: taken };
  const ips = (port.fixed_ips ?? []).map((f) => f.ip_address).join(', ');
  const what = `port ${port.name || port.id} (${ips})${fip?.floating_ip_address ? ` with floating IP ${fip.floating_ip_address}` : ''}`;
  if (!ctx.apply)
    return {
      outcome: 'ready',
      detail: `${what} would be created again${fip?.floating_ip_address ? " (choosing the floating IP's address needs an admin's credentials, by Neutron's default policy)" : ''}`,
    };
  const made = await n.create<Port>(
    'ports',
    {
      network_id: port.network_id,
      ...(port.project_id ? { project_id: port.project_id } : {}),
      fixed_ips: (port.fixed_ips ?? []).map((f) => ({
        ...(f.subnet_id ? { subnet_id: f.subnet_id } : {}),
        ip_address: f.ip_address,
      })),
      ...(port.name ? { name: port.name } : {}),
      ...(port.description ? { description: port.description } : {}),
      ...(port.device_owner ? { device_owner: port.device_owner } : {}),
      ...(port.device_id ? { device_id: port.device_id } : {}),
      // As it was: a port without port security (ch-k8s-lbaas' own) comes back without it and
      // without security groups; given no groups, Neutron would add the project's default one.
      ...(port.port_security_enabled !== undefined
        ? { port_security_enabled: port.port_security_enabled }
        : {}),
      ...(port.security_groups !== undefined ? { security_groups: port.security_groups } : {}),
    },
    keptTags(port.tags),
    ctx.signal,
  );
  if (made === 'taken') return { outcome: 'refused', reason: `${ips} was allocated in between` };
  if ('forbidden' in made)
    return { outcome: 'refused', reason: `Neutron's policy refused the port: ${made.forbidden}` };
  const ids: Record<string, string> = { port: made.id };
  if (fip?.floating_ip_address) {
    const f = await restoreFip(n, { ...fip, port_id: made.id }, ctx);
    if (f.outcome === 'refused') {
      await n.deletePort(made.id, undefined, ctx.signal).catch(() => {});
      return { outcome: 'refused', reason: `${f.reason} (the new port was deleted again)` };
    }
    Object.assign(ids, f.ids);
  }
  return {
    outcome: 'restored',
    detail: `${what} created again: port ${made.id}${ids.floatingIp ? `, floating IP ${ids.floatingIp}` : ''}`,
    ids,
  };
}

/** A floating IP created again with its address (on `port_id` if given, else unassociated). */
export async function restoreFip(
  n: NeutronClient,
  fip: FullFip,
  ctx: Readonly<{ apply: boolean; signal: AbortSignal }>,
): Promise<NeutronRestore> {
  if (!fip.floating_network_id || !fip.floating_ip_address)
    return {
      outcome: 'refused',
      reason: "the tombstone does not name the floating IP's network and address",
    };
  const taken = await free(n, undefined, fip, ctx.signal);
  if (taken) return { outcome: 'refused', reason: taken };
  const what = `floating IP ${fip.floating_ip_address}`;
  if (!ctx.apply)
    return {
      outcome: 'ready',
      detail: `${what} would be allocated again (choosing its address needs credentials Neutron's policy allows it: an admin's, by default)`,
    };
  const made = await n.create<FloatingIp>(
    'floatingips',
    {
      floating_network_id: fip.floating_network_id,
      floating_ip_address: fip.floating_ip_address,
      ...(fip.project_id ? { project_id: fip.project_id } : {}),
      ...(fip.port_id ? { port_id: fip.port_id } : {}),
      ...(fip.description ? { description: fip.description } : {}),
    },
    keptTags(fip.tags),
    ctx.signal,
  );
  if (made === 'taken')
    return { outcome: 'refused', reason: `${fip.floating_ip_address} was allocated in between` };
  if ('forbidden' in made)
    return {
      outcome: 'refused',
      reason: `Neutron's policy refused a floating IP of a chosen address (${made.forbidden}): by default only an admin may choose one; restore with an admin's credentials (OS_CLOUD)`,
    };
  return { outcome: 'restored', detail: `${what} allocated again: ${made.id}`, ids: { floatingIp: made.id } };
}
