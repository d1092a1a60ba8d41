/** The fake's Neutron collections: a resource created (ports, floating IPs, security groups), and a collection listed as Neutron filters and pages it. */
import type { FloatingIp, Port, SecurityGroup } from '../../openstack/neutron.ts';
import type { NeutronState, Send, TokenInfo } from './common.ts';
import { type Link, pageLinks } from './neutron-rules.ts';

export function createResource(
  os: NeutronState,
  collection: string,
  raw: string,
  t: TokenInfo,
  send: Send,
): void {
  const asked = (JSON.parse(raw || '{}') as Record<string, { project_id?: string } | undefined>)[
    collection === 'security-groups' ? 'security_group' : collection === 'ports' ? 'port' : 'floatingip'
  ]?.project_id;
  // an admin may make a resource in another project (project_id in the body), as Neutron allows
  const projectId = t.admin && asked ? asked : t.projectId;
  const body = JSON.parse(raw || '{}') as {
    security_group?: { name?: string; description?: string };
    port?: Partial<Port> & { network_id?: string; security_groups?: string[] };
    floatingip?: {
      floating_network_id?: string;
      port_id?: string;
      floating_ip_address?: string;
      description?: string;
    };
  };
  if (collection === 'security-groups') {
    const g = body.security_group ?? {};
    send(201, {
      security_group: os.addSecurityGroup({
        project_id: projectId,
        name: g.name ?? '',
        description: g.description ?? '',
      }),
    });
    return;
  }
  if (collection === 'ports') createPort(os, body.port ?? {}, projectId, send);
  else createFip(os, body.floatingip ?? {}, t, projectId, send);
}

/** POST /ports: an address not taken, port security as ML2's extension driver has it. */
function createPort(
  os: NeutronState,
  p: Partial<Port> & { network_id?: string; security_groups?: string[] },
  projectId: string,
  send: Send,
): void {
  const taken = (p.fixed_ips ?? []).find((f) =>
    [...os.ports.values()].some((o) => o.fixed_ips?.some((x) => x.ip_address === f.ip_address)),
  );
  if (taken) {
    send(409, {
      NeutronError: {
        type: 'IpAddressAlreadyAllocated',
        message: `IP address ${taken.ip_address} already allocated in subnet ${taken.subnet_id ?? 'subnet-1'}`,
        detail: '',
      },
    });
    return;
  }
  // As ML2's port_security extension driver: security on by default, and then the
  // project's default group unless groups are given; off, no group may be given.
  const secured = p.port_security_enabled ?? true;
  if (!secured && p.security_groups?.length) {
    send(400, {
      NeutronError: {
        type: 'PortSecurityAndIPRequiredForSecurityGroups',
        message:
          'Port security must be enabled and port must have an IP address in order to use security groups.',
        detail: '',
      },
    });
    return;
  }
  const n = os.ports.size + 10;
  const port = os.addPort({
    project_id: projectId,
    name: p.name ?? '',
    description: p.description ?? '',
    device_id: p.device_id ?? '',
    device_owner: p.device_owner ?? '',
    fixed_ips: p.fixed_ips ?? [{ ip_address: `10.1.${Math.floor(n / 250)}.${(n % 250) + 2}` }],
    port_security_enabled: secured,
    security_groups: p.security_groups ?? (secured ? [os.defaultGroup(projectId).id] : []),
  });
  send(201, { port });
}

/** POST /floatingips: a chosen address is admin-only and must be free. */
function createFip(
  os: NeutronState,
  f: { floating_network_id?: string; port_id?: string; floating_ip_address?: string; description?: string },
  t: TokenInfo,
  projectId: string,
  send: Send,
): void {
  const port = f.port_id ? os.ports.get(f.port_id) : undefined;
  const n = os.fips.size + 10;
  // a floating IP of a chosen address is admin-only (Neutron's create_floatingip:floating_ip_address)
  if (f.floating_ip_address && !t.admin) {
    send(403, {
      NeutronError: {
        type: 'PolicyNotAuthorized',
        message:
          '(rule:create_floatingip and rule:create_floatingip:floating_ip_address) is disallowed by policy',
        detail: '',
      },
    });
    return;
  }
  if (
    f.floating_ip_address &&
    [...os.fips.values()].some((x) => x.floating_ip_address === f.floating_ip_address)
  ) {
    send(409, {
      NeutronError: {
        type: 'IpAddressAlreadyAllocated',
        message: `IP address ${f.floating_ip_address} already allocated in subnet public-subnet`,
        detail: '',
      },
    });
    return;
  }
  const fip = os.addFip({
    project_id: projectId,
    ...(f.description !== undefined ? { description: f.description } : {}),
    floating_ip_address: f.floating_ip_address ?? `198.18.${Math.floor(n / 250)}.${(n % 250) + 2}`,
    port_id: port?.id ?? null,
    fixed_ip_address: port?.fixed_ips?.[0]?.ip_address ?? null,
  });
  send(201, { floatingip: fip });
}

export function listCollection(
  os: NeutronState,
  collection: string,
  store: Map<string, Port | FloatingIp | SecurityGroup>,
  url: URL,
  base: { proto: string; host: string; path: string },
  t: TokenInfo,
  send: Send,
  empty: boolean,
): void {
  const listKey = collection === 'security-groups' ? 'security_groups' : collection;
  const q = url.searchParams;
  const tags = q.get('tags')?.split(',').filter(Boolean) ?? [];
  const tagsAny = q.get('tags-any')?.split(',').filter(Boolean) ?? [];
  const notTags = q.get('not-tags')?.split(',').filter(Boolean) ?? [];
  const project = q.get('project_id');
  const deviceId = q.get('device_id');
  const fields = q.getAll('fields');
  let items = [...store.values()]
    // a member token sees its project; an admin token every project (project_id narrows it)
    .filter(
      (o) => (t.admin || o.project_id === t.projectId) && (project === null || o.project_id === project),
    )
    .filter(
      (o) =>
        tags.every((x) => o.tags?.includes(x)) &&
        (tagsAny.length === 0 || tagsAny.some((x) => o.tags?.includes(x))) &&
        !notTags.some((x) => o.tags?.includes(x)),
    )
    .filter((o) => deviceId === null || (o as Port).device_id === deviceId)
    // fixed_ips=ip_address=X (ports), floating_ip_address=X (floating IPs), as Neutron filters
    .filter((o) => {
      const want = q
        .getAll('fixed_ips')
        .map((f) => /^ip_address=(.+)$/.exec(f)?.[1])
        .filter(Boolean);
      return want.every((a) => (o as Port).fixed_ips?.some((x) => x.ip_address === a));
    })
    .filter((o) => {
      const want = q.get('floating_ip_address');
      return want === null || (o as FloatingIp).floating_ip_address === want;
    })
    .sort((a, b) => (a.id < b.id ? -1 : 1));
  const limit = Number(q.get('limit') ?? '0');
  const marker = q.get('marker');
  if (os.pagination && limit > 0 && empty && items.some((o) => !marker || o.id > marker)) {
    // an empty page that keeps its place: the next link repeats the same marker
    send(200, {
      [collection]: [],
      [`${listKey}_links`]: [{ rel: 'next', href: `${base.proto}://${base.host}${base.path}?${q}` }],
    });
    return;
  }
  let links: Link[] | undefined;
  if (os.pagination && limit > 0) {
    if (marker) items = items.filter((o) => o.id > marker);
    items = items.slice(0, limit);
    links = pageLinks(base, q, items, limit);
  }
  const shaped = fields.length
    ? items.map((o) => Object.fromEntries(Object.entries(o).filter(([k]) => fields.includes(k))))
    : items;
  send(200, { [listKey]: shaped, ...(links ? { [`${listKey}_links`]: links } : {}) });
}
