/**
 * Cases of the OpenStack contract where the fake Neutron used to differ from the real one
 * (Debian's Zed), each run on both: links, If-Match, tag routes, revisions, updates,
 * service-owned ports, admin visibility, empty device owners. The fake follows
 * shared/sandbox/openstack/neutron-rules.ts.
 */
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import * as assert from 'uvu/assert';
import type { FloatingIp, Port } from '../../shared/openstack/neutron.ts';
import type { OsClient, OsTarget } from './os-contract.ts';

type Link = { rel: string; href: string };
type It = (title: string, fn: (t: OsTarget) => Promise<void>) => void;
type Helpers = {
  client: (t: OsTarget, kind?: 'password' | 'appcred' | 'admin') => OsClient;
  createPort: (t: OsTarget, c: OsClient, name: string, tags?: string[]) => Promise<Port>;
};

const rels = (body: Record<string, unknown>, key = 'ports_links') =>
  ((body?.[key] ?? []) as Link[]).map((l) => l.rel).sort();
const nextOf = (body: Record<string, unknown>) =>
  ((body?.ports_links ?? []) as Link[]).find((l) => l.rel === 'next')?.href;

/** A GET of an absolute href (a link the server wrote), with the client's token. */
async function follow(c: OsClient, href: string): Promise<Record<string, unknown>> {
  const r = await request(href, {
    headers: { 'x-auth-token': await c.auth.get(), accept: 'application/json' },
  });
  return (await r.body.json()) as Record<string, unknown>;
}

export function parityCases(it: It, { client, createPort }: Helpers): void {
  it('links as Neutron writes them: previous on every page, next on every full one (a full last page leads to an empty page), none without limit, hrefs from Host and X-Forwarded-Proto', async (t) => {
    const c = client(t);
    const x = `l-${randomUUID().slice(0, 8)}`;
    const made: Port[] = [];
    for (let i = 0; i < 4; i++) made.push(await createPort(t, c, `${x}-${i}`, [x]));
    const all = await c.raw('GET', `/ports?tags=${x}`);
    assert.is((all.body.ports as Port[]).length, 4);
    assert.not.ok('ports_links' in all.body, 'no links key without limit');

    const p1 = await c.raw('GET', `/ports?tags=${x}&limit=2`);
    assert.equal(rels(p1.body), ['next', 'previous'], 'the first page has previous too');
    const p2 = await follow(c, nextOf(p1.body)!);
    assert.is((p2.ports as Port[]).length, 2);
    assert.equal(rels(p2), ['next', 'previous'], 'a full last page still has next');
    const p3 = await follow(c, nextOf(p2)!);
    assert.equal(p3.ports, [], 'which leads to an empty page');
    assert.equal(rels(p3), ['previous']);
    const q1 = await c.raw('GET', `/ports?tags=${x}&limit=3`);
    const q2 = await follow(c, nextOf(q1.body)!);
    assert.is((q2.ports as Port[]).length, 1);
    assert.equal(rels(q2), ['previous'], 'a page that is not full has no next');

    const base = await c.networkBase();
    const r = await request(`${base}/ports?tags=${x}&limit=2`, {
      headers: {
        'x-auth-token': await c.auth.get(),
        host: 'neutron.example.test:9696',
        'x-forwarded-proto': 'https',
      },
    });
    const proxied = (await r.body.json()) as Record<string, unknown>;
    for (const l of proxied.ports_links as Link[])
      assert.match(l.href, /^https:\/\/neutron\.example\.test:9696\//, `${l.rel}: ${l.href}`);
    for (const p of made) await c.neutron.deletePort(p.id, undefined);
    await c.close();
  });

  it('If-Match: two values and a non-integer revision are 400 (nothing deleted); any other value is ignored and the port is deleted', async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `m-${randomUUID().slice(0, 8)}`);
    const two = await c.raw('DELETE', `/ports/${p.id}`, undefined, {
      'if-match': 'revision_number=1, revision_number=2',
    });
    assert.is(two.status, 400);
    const word = await c.raw('DELETE', `/ports/${p.id}`, undefined, { 'if-match': 'revision_number=abc' });
    assert.is(word.status, 400);
    assert.ok(await c.neutron.getPort(p.id), 'still there');
    const other = await c.raw('DELETE', `/ports/${p.id}`, undefined, { 'if-match': 'not-a-revision' });
    assert.is(other.status, 204, 'an If-Match of another form is no precondition at all');
    assert.is(await c.neutron.getPort(p.id), undefined);
    await c.close();
  });

  it('tags: adding one answers 201 with the body null; an encoded slash in a tag is 404', async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `t-${randomUUID().slice(0, 8)}`);
    const add = await c.raw('PUT', `/ports/${p.id}/tags/one`);
    assert.is(add.status, 201);
    assert.is(add.text, 'null');
    const slash = await c.raw('PUT', `/ports/${p.id}/tags/a%2Fb`);
    assert.is(slash.status, 404);
    assert.equal((await c.neutron.getPort(p.id))?.tags, ['one']);
    await c.neutron.deletePort(p.id, undefined);
    await c.close();
  });

  it('revisions and updates: a floating IP starts at 0 and keeps its port on a description update; a port update answers 200 with a revision the next GET never goes below', async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `v-${randomUUID().slice(0, 8)}`);
    const made = await c.raw('POST', '/floatingips', {
      floatingip: {
        ...(t.floatingNetworkId ? { floating_network_id: t.floatingNetworkId } : {}),
        port_id: p.id,
      },
    });
    assert.is(made.status, 201);
    const fip = made.body.floatingip as FloatingIp;
    assert.is(fip.revision_number, 0);
    const described = await c.raw('PUT', `/floatingips/${fip.id}`, { floatingip: { description: 'kept' } });
    assert.is(described.status, 200);
    assert.is((described.body.floatingip as FloatingIp).port_id, p.id, 'a description update keeps port_id');
    assert.is((await c.neutron.getFloatingIp(fip.id))?.port_id, p.id);
    const put = await c.raw('PUT', `/ports/${p.id}`, { port: { description: 'updated' } });
    assert.is(put.status, 200, 'ports can be updated');
    const replied = (put.body.port as Port).revision_number!;
    const after = (await c.neutron.getPort(p.id))!.revision_number!;
    assert.ok(after >= replied, `GET ${after} >= PUT reply ${replied}`);
    await c.neutron.deleteFloatingIp(fip.id, undefined);
    await c.neutron.deletePort(p.id, undefined);
    await c.close();
  });

  it('what a restore asks: ports by fixed_ips=ip_address=X, floating IPs by floating_ip_address; a port made again on a taken fixed IP and a floating IP on a taken address are 409; both can be made with an address of their choosing', async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `r-${randomUUID().slice(0, 8)}`);
    const ip = p.fixed_ips![0]!.ip_address;
    assert.is(await c.neutron.addressHolder('fixed', ip), p.id);
    const again = await c.raw('POST', '/ports', {
      port: { ...(t.networkId ? { network_id: t.networkId } : {}), fixed_ips: [{ ip_address: ip }] },
    });
    assert.is(again.status, 409, 'a taken fixed IP');
    const fip = (
      await c.raw('POST', '/floatingips', {
        floatingip: { ...(t.floatingNetworkId ? { floating_network_id: t.floatingNetworkId } : {}) },
      })
    ).body.floatingip as FloatingIp;
    const addr = fip.floating_ip_address!;
    assert.is(await c.neutron.addressHolder('floating', addr), fip.id);
    // choosing the address is admin-only (Neutron's create_floatingip:floating_ip_address)
    const chosen = {
      floatingip: {
        ...(t.floatingNetworkId ? { floating_network_id: t.floatingNetworkId } : {}),
        floating_ip_address: addr,
      },
    };
    const member = await c.raw('POST', '/floatingips', chosen);
    assert.is(member.status, 403, 'a member may not choose the address');
    assert.match(member.text, /PolicyNotAuthorized/);
    const admin = client(t, 'admin');
    const twice = await admin.raw('POST', '/floatingips', chosen);
    assert.is(twice.status, 409, 'a taken floating IP address');
    await c.neutron.deleteFloatingIp(fip.id, undefined);
    await c.neutron.deletePort(p.id, undefined);
    assert.is(await c.neutron.addressHolder('fixed', ip), undefined, 'free once its port is gone');
    const made = await admin.neutron.create<FloatingIp>(
      'floatingips',
      {
        ...(t.floatingNetworkId ? { floating_network_id: t.floatingNetworkId } : {}),
        floating_ip_address: addr,
        project_id: fip.project_id,
      },
      ['restored'],
      undefined,
    );
    assert.ok(
      typeof made === 'object' && 'id' in made && made.floating_ip_address === addr,
      'the same address again',
    );
    const back = await c.neutron.getFloatingIp((made as FloatingIp).id);
    assert.equal(back?.tags, ['restored'], "in the member's project, with its tags");
    await c.neutron.deleteFloatingIp((made as FloatingIp).id, undefined);
    await admin.close();
    await c.close();
  });

  it("409 ServicePortInUse: a router interface's port cannot be deleted through the port API", async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `ri-${randomUUID().slice(0, 8)}`);
    const r = await c.raw('POST', '/routers', { router: { name: `ri-${randomUUID().slice(0, 8)}` } });
    assert.is(r.status, 201, JSON.stringify(r.body));
    const router = r.body.router as { id: string };
    const add = await c.raw('PUT', `/routers/${router.id}/add_router_interface`, { port_id: p.id });
    assert.is(add.status, 200, JSON.stringify(add.body));
    assert.is((await c.neutron.getPort(p.id))?.device_owner, 'network:router_interface');
    const del = await c.raw('DELETE', `/ports/${p.id}`);
    assert.is(del.status, 409);
    assert.is((del.body.NeutronError as { type?: string })?.type, 'ServicePortInUse');
    // the client's delete is an error (never "gone" or "conflict"): the run reports it as failed
    const client409 = await c.neutron.deletePort(p.id, undefined).then(
      (x) => x as string,
      (e: Error) => e.message,
    );
    assert.match(client409, /409 ServicePortInUse/);
    assert.ok(await c.neutron.getPort(p.id), 'the port is still there');
    const rm = await c.raw('PUT', `/routers/${router.id}/remove_router_interface`, { port_id: p.id });
    assert.is(rm.status, 200);
    assert.is(await c.neutron.getPort(p.id), undefined, 'removing the interface removed its port');
    assert.is((await c.raw('DELETE', `/routers/${router.id}`)).status, 204);
    await c.close();
  });

  it("an admin token sees another project's ports through project_id; a member token does not see the admin's", async (t) => {
    const member = client(t);
    const admin = client(t, 'admin');
    const x = `a-${randomUUID().slice(0, 8)}`;
    const mine = await createPort(t, member, `${x}-m`, [x]);
    const seen = await admin.raw('GET', `/ports?project_id=${t.projectId}&tags=${x}`);
    assert.equal(
      (seen.body.ports as Port[]).map((p) => p.id),
      [mine.id],
    );
    // on the admin's own (external) network: a member sees the ports of networks it owns,
    // whatever their project (Neutron's network-owner rule, which the fake does not model)
    const theirs = await admin.raw('POST', '/ports', {
      port: { name: `${x}-a`, ...(t.floatingNetworkId ? { network_id: t.floatingNetworkId } : {}) },
    });
    assert.is(theirs.status, 201, JSON.stringify(theirs.body).slice(0, 300));
    const adminPort = theirs.body.port as Port;
    assert.is.not(adminPort.project_id, t.projectId);
    const hidden = await member.raw('GET', `/ports?project_id=${adminPort.project_id}&name=${x}-a`);
    assert.equal(hidden.body.ports, [], "a member's token never lists another project");
    assert.is((await member.raw('GET', `/ports/${adminPort.id}`)).status, 404);
    await admin.neutron.deletePort(adminPort.id, undefined);
    await member.neutron.deletePort(mine.id, undefined);
    await member.close();
    await admin.close();
  });

  it('a port made without a device_owner lists with device_owner "" (controller ports and keepalived VIPs look so)', async (t) => {
    const c = client(t);
    const x = `o-${randomUUID().slice(0, 8)}`;
    const p = await createPort(t, c, x, [x]);
    const listed = await c.neutron.listPorts({ tags: [x] });
    assert.is(listed.items[0]?.device_owner, '');
    assert.is(listed.items[0]?.device_id, '');
    await c.neutron.deletePort(p.id, undefined);
    await c.close();
  });
}
