/** The fake's Neutron objects once found: a port updated, an object deleted, tags, a floating IP's association, a router's interfaces. */
import { randomUUID } from 'node:crypto';
import type { FloatingIp, Port, SecurityGroup } from '../../openstack/neutron.ts';
import { type NeutronState, NOT_FOUND, refusedByIfMatch, type Send, type TokenInfo } from './common.ts';
import { SERVICE_OWNERS } from './neutron-rules.ts';

/** PUT of a port: the fields a port update may change here, conditional on If-Match. */
export function updatePort(
  os: NeutronState,
  obj: Port,
  raw: string,
  ifMatch: string | undefined,
  send: Send,
) {
  const p = (JSON.parse(raw || '{}') as { port?: Partial<Port> & { security_groups?: unknown } }).port ?? {};
  // Neutron looks the groups up before If-Match: one that does not exist is a 404
  const missing = Array.isArray(p.security_groups)
    ? (p.security_groups as unknown[]).find((g) => typeof g !== 'string' || !os.securityGroups.has(g))
    : undefined;
  if (missing !== undefined)
    return send(404, {
      NeutronError: {
        type: 'SecurityGroupNotFound',
        message: `Security group ${String(missing)} does not exist`,
        detail: '',
      },
    });
  // an update may be conditional too (revision-if-match applies to every write)
  if (refusedByIfMatch(ifMatch, obj.revision_number, send)) return;
  // the fields a port update may change here; the reply's revision is the one the write made
  const change: Partial<Port> & { security_groups?: string[] } = {};
  for (const k of ['name', 'description', 'device_id', 'device_owner'] as const)
    if (typeof p[k] === 'string') change[k] = p[k];
  if (Array.isArray(p.security_groups) && p.security_groups.every((g) => typeof g === 'string'))
    change.security_groups = [...new Set(p.security_groups as string[])];
  os.update(obj, change);
  return send(200, { port: obj });
}

/** DELETE of a port, floating IP or security group: If-Match, a group in use, a service's port. */
export function deleteObject(
  os: NeutronState,
  collection: string,
  store: Map<string, Port | FloatingIp | SecurityGroup>,
  obj: Port | FloatingIp | SecurityGroup,
  ifMatch: string | undefined,
  send: Send,
) {
  const im = ifMatch;
  os.deleteIfMatch.push(im);
  if (im !== undefined && !os.extensions.includes('revision-if-match'))
    return send(400, {
      NeutronError: { type: 'HTTPBadRequest', message: 'If-Match is not supported', detail: '' },
    });
  if (refusedByIfMatch(im, obj.revision_number, send)) return;
  if (
    collection === 'security-groups' &&
    [...os.ports.values()].some((p) =>
      (p as { security_groups?: string[] }).security_groups?.includes(obj.id),
    )
  )
    return send(409, {
      NeutronError: {
        type: 'SecurityGroupInUse',
        message: `Security Group ${obj.id} in use.`,
        detail: '',
      },
    });
  const owner = collection === 'ports' ? (obj as Port).device_owner : undefined;
  if (owner && SERVICE_OWNERS.includes(owner))
    return send(409, {
      NeutronError: {
        type: 'ServicePortInUse',
        message: `Port ${obj.id} cannot be deleted directly via the port API: has device owner ${owner}.`,
        detail: '',
      },
    });
  store.delete(obj.id);
  if (collection === 'ports')
    for (const f of os.fips.values())
      if (f.port_id === obj.id) os.update(f, { port_id: null, fixed_ip_address: null });
  return send(204, undefined);
}

/** standard-attr-tag: PUT replaces all tags, PUT /tags/{tag} adds one (201, body null), DELETE removes one. */
export function tags(
  os: NeutronState,
  obj: Port | FloatingIp,
  method: string,
  subId: string | undefined,
  raw: string,
  send: Send,
) {
  // an encoded slash never reaches the tag route: the real server answers 404
  if (subId !== undefined && /%2f/i.test(subId)) return send(404, NOT_FOUND);
  if (method === 'PUT' && subId === undefined) {
    const tags = (JSON.parse(raw || '{}') as { tags?: unknown }).tags;
    if (!Array.isArray(tags) || !tags.every((x) => typeof x === 'string'))
      return send(400, { NeutronError: { type: 'HTTPBadRequest', message: 'Invalid tags', detail: '' } });
    os.update(obj, { tags: [...new Set(tags as string[])].sort() });
    return send(200, { tags: obj.tags });
  }
  if (method === 'PUT' && subId !== undefined) {
    const tag = decodeURIComponent(subId);
    if (!obj.tags?.includes(tag)) os.update(obj, { tags: [...(obj.tags ?? []), tag].sort() });
    return send(201, null);
  }
  if (method === 'DELETE' && subId !== undefined) {
    const tag = decodeURIComponent(subId);
    if (!obj.tags?.includes(tag))
      return send(404, {
        NeutronError: { type: 'TagNotFound', message: `Tag ${tag} could not be found.`, detail: '' },
      });
    os.update(obj, { tags: (obj.tags ?? []).filter((x) => x !== tag) });
    return send(204, undefined);
  }
  return send(405, {
    NeutronError: { type: 'HTTPMethodNotAllowed', message: `${method} not allowed`, detail: '' },
  });
}

/** A floating IP update: the port association changes only when `port_id` is in the body. */
export function updateFip(os: NeutronState, fip: FloatingIp, raw: string, t: TokenInfo, send: Send) {
  const f =
    (JSON.parse(raw || '{}') as { floatingip?: { port_id?: string | null; description?: string } })
      .floatingip ?? {};
  const change: Partial<FloatingIp> = {};
  if ('port_id' in f) {
    const port = f.port_id ? os.ports.get(f.port_id) : undefined;
    if (f.port_id && (!port || (port.project_id !== t.projectId && !t.admin)))
      return send(404, {
        NeutronError: {
          type: 'PortNotFound',
          message: `Port ${f.port_id} could not be found.`,
          detail: '',
        },
      });
    change.port_id = port?.id ?? null;
    change.fixed_ip_address = port?.fixed_ips?.[0]?.ip_address ?? null;
  }
  if (typeof f.description === 'string') change.description = f.description;
  os.update(fip, change);
  return send(200, { floatingip: fip });
}

/** Routers, as far as their interfaces make a port the router's (device_owner network:router_interface). */
export function router(
  os: NeutronState,
  method: string,
  id: string | undefined,
  action: string | undefined,
  raw: string,
  t: TokenInfo,
  send: Send,
) {
  const body = JSON.parse(raw || '{}') as { router?: { name?: string }; port_id?: string };
  if (id === undefined && method === 'POST') {
    const r = { id: randomUUID(), project_id: t.projectId, name: body.router?.name ?? '', ports: [] };
    os.routers.set(r.id, r);
    return send(201, {
      router: { id: r.id, name: r.name, project_id: r.project_id, tenant_id: r.project_id },
    });
  }
  const r = id ? os.routers.get(id) : undefined;
  if (!r || (r.project_id !== t.projectId && !t.admin))
    return send(404, {
      NeutronError: { type: 'RouterNotFound', message: `Router ${id} could not be found.`, detail: '' },
    });
  if (method === 'PUT' && (action === 'add_router_interface' || action === 'remove_router_interface')) {
    const port = body.port_id ? os.ports.get(body.port_id) : undefined;
    if (!port)
      return send(404, {
        NeutronError: {
          type: 'PortNotFound',
          message: `Port ${body.port_id} could not be found.`,
          detail: '',
        },
      });
    if (action === 'add_router_interface') {
      os.update(port, { device_owner: 'network:router_interface', device_id: r.id });
      r.ports.push(port.id);
    } else {
      // removing the interface deletes the port, as Neutron does for a port it made the router's
      r.ports = r.ports.filter((p) => p !== port.id);
      os.ports.delete(port.id);
    }
    return send(200, { id: r.id, port_id: port.id, tenant_id: r.project_id, project_id: r.project_id });
  }
  if (method === 'DELETE' && action === undefined) {
    if (r.ports.length > 0)
      return send(409, {
        NeutronError: { type: 'RouterInUse', message: `Router ${r.id} still has ports`, detail: '' },
      });
    os.routers.delete(r.id);
    return send(204, undefined);
  }
  if (method === 'GET' && action === undefined) return send(200, { router: { id: r.id, name: r.name } });
  return send(405, {
    NeutronError: { type: 'HTTPMethodNotAllowed', message: `${method} not allowed`, detail: '' },
  });
}
