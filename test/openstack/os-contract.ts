/**
 * One OpenStack contract suite, run against the fake Keystone + Neutron
 * (os-contract.fake.test.ts) and a real Keystone + Neutron from Debian's packages
 * (os-contract.real.test.ts): what the client and lbaas-ports rely on. A behaviour
 * that only the fake has is a bug in the fake.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { OpenStackConfigError } from '../../shared/openstack/errors.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { type FloatingIp, NeutronClient, type Port } from '../../shared/openstack/neutron.ts';
import { testTime } from '../helpers/time.ts';
import { parityCases } from './os-parity.ts';

export type OsTarget = Readonly<{
  name: 'fake' | 'real';
  /** A clouds.yaml with one cloud named `contract`. */
  /** `admin`: an admin of another project (the admin role sees every project). */
  cloudsYaml: (kind: 'password' | 'appcred' | 'admin', region?: string) => string;
  /** The identity v3 URL as the clouds.yaml gives it (ends in /v3). */
  authUrl: string;
  projectId: string;
  /** The network to create ports on (real), and the external network for floating IPs. */
  networkId?: string;
  subnetId?: string;
  floatingNetworkId?: string;
  close: () => Promise<void>;
}>;

export type OsClient = {
  auth: KeystoneAuth;
  neutron: NeutronClient;
  /** The network API's base URL (…/v2.0). */
  networkBase: () => Promise<string>;
  raw: (
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ) => Promise<{ status: number; body: Record<string, unknown>; text: string }>;
  close: () => Promise<void>;
};
type Client = OsClient;

function client(
  t: OsTarget,
  kind: 'password' | 'appcred' | 'admin' = 'password',
  pageSize = 500,
  region?: string,
  edit: (yaml: string) => string = (y) => y,
): Client {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-os-contract-'));
  writeFileSync(join(dir, 'clouds.yaml'), edit(t.cloudsYaml(kind, region)));
  const cloud = loadCloudConfig({ OS_CLOUD: 'contract', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') });
  const http = new Http({ timeoutMs: 30_000, time: testTime() });
  const auth = new KeystoneAuth(cloud, http, Date.now);
  const neutron = new NeutronClient(auth, http, pageSize);
  const networkBase = async () => {
    const base = await auth.endpoint('network');
    return base.endsWith('/v2.0') ? base : `${base}/v2.0`;
  };
  const raw: Client['raw'] = async (method, path, body, headers = {}) => {
    const url = `${await networkBase()}${path}`;
    const res = await fetch(url, {
      method,
      headers: {
        'x-auth-token': await auth.get(),
        accept: 'application/json',
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let parsed: Record<string, unknown> | null = {};
    try {
      parsed = text ? (JSON.parse(text) as Record<string, unknown> | null) : {};
    } catch {
      parsed = { text };
    }
    return { status: res.status, body: parsed ?? {}, text };
  };
  return { auth, neutron, networkBase, raw, close: () => http.close() };
}

async function createPort(t: OsTarget, c: Client, name: string, tags: string[] = []): Promise<Port> {
  const r = await c.raw('POST', '/ports', {
    port: { name, ...(t.networkId ? { network_id: t.networkId } : {}) },
  });
  assert.is(r.status, 201, `create port: ${JSON.stringify(r.body).slice(0, 300)}`);
  const port = r.body.port as Port;
  if (tags.length > 0) {
    const tr = await c.raw('PUT', `/ports/${port.id}/tags`, { tags });
    assert.is(tr.status, 200, `replace tags: ${JSON.stringify(tr.body)}`);
  }
  return port;
}

/** `getTarget` undefined: the servers are not there, and every test is reported as skipped. */
export function osContract(label: string, getTarget: (() => Promise<OsTarget>) | undefined): void {
  const test = suite<{ t?: OsTarget }>(`OpenStack contract (${label})`);
  test.before(async (ctx) => {
    if (getTarget) ctx.t = await getTarget();
  });
  test.after(async (ctx) => ctx.t?.close());
  const it = (title: string, fn: (t: OsTarget) => Promise<void>) =>
    (getTarget ? test : test.skip)(title, async (ctx) => {
      await fn(ctx.t!);
    });

  it('password and application-credential auth; the catalog names the network endpoint of the region', async (t) => {
    for (const kind of ['password', 'appcred'] as const) {
      const c = client(t, kind);
      assert.match(await c.auth.endpoint('network'), /^http:\/\/127\.0\.0\.1:\d+/);
      await c.neutron.listPorts({ project_id: t.projectId });
      await c.close();
    }
    const wrong = client(t, 'password', 500, 'Nowhere');
    let err: unknown;
    try {
      await wrong.auth.endpoint('network');
    } catch (e) {
      err = e;
    }
    assert.match(String((err as Error)?.message), /no network endpoint .* in region Nowhere/);
    await wrong.close();
  });

  it('configuration errors are OpenStackConfigError (exit 2), never raw HTML: password, auth_url; a root auth_url is discovered', async (t) => {
    const rejects = async (c: Client, re: RegExp, what: string) => {
      let err: unknown;
      try {
        await c.neutron.listPorts({});
      } catch (e) {
        err = e;
      }
      await c.close();
      assert.instance(err, OpenStackConfigError, what);
      assert.match((err as Error).message, re, what);
      assert.not.match((err as Error).message, /<(!doctype|html)/i, `${what}: no raw HTML`);
    };
    await rejects(
      client(t, 'password', 500, undefined, (y) => y.replace(/password: .*/, 'password: wrong-password')),
      /authentication refused.*check the credentials/,
      'a wrong password',
    );
    const root = t.authUrl.replace(/\/v3$/, '');
    await rejects(
      client(t, 'password', 500, undefined, (y) => y.replace(t.authUrl, `${root}/no-such-path/v3`)),
      /no identity v3 API there.*check auth_url/,
      'an auth_url that names no identity API',
    );
    // auth_url without /v3: the version document of the root (or /v3 appended) finds the API
    const c = client(t, 'password', 500, undefined, (y) => y.replace(t.authUrl, root));
    await c.neutron.listPorts({ project_id: t.projectId });
    await c.close();
  });

  it('ports: create, get, list by tags / tags-any / not-tags; a replaced tag set', async (t) => {
    const c = client(t);
    const x = `c-${randomUUID().slice(0, 8)}`;
    const p1 = await createPort(t, c, `${x}-1`, [`${x}-a`, `${x}-b`]);
    const p2 = await createPort(t, c, `${x}-2`, [`${x}-a`]);
    const p3 = await createPort(t, c, `${x}-3`, [`${x}-c`]);
    const got = await c.neutron.getPort(p1.id);
    assert.equal([...(got?.tags ?? [])].sort(), [`${x}-a`, `${x}-b`]);
    assert.is(got?.project_id, t.projectId);
    const ids = (r: { items: { id: string }[] }) => r.items.map((i) => i.id).sort();
    assert.equal(ids(await c.neutron.listPorts({ tags: [`${x}-a`, `${x}-b`] })), [p1.id]);
    assert.equal(ids(await c.neutron.listPorts({ tags: [`${x}-a`] })), [p1.id, p2.id].sort());
    const any = await c.raw('GET', `/ports?tags-any=${x}-b,${x}-c`);
    assert.equal((any.body.ports as Port[]).map((p) => p.id).sort(), [p1.id, p3.id].sort());
    const not = await c.raw('GET', `/ports?tags-any=${x}-a,${x}-c&not-tags=${x}-b`);
    assert.equal((not.body.ports as Port[]).map((p) => p.id).sort(), [p2.id, p3.id].sort());
    const add = await c.raw('PUT', `/ports/${p3.id}/tags/${x}-d`);
    assert.is(add.status, 201);
    assert.equal([...((await c.neutron.getPort(p3.id))?.tags ?? [])].sort(), [`${x}-c`, `${x}-d`]);
    for (const p of [p1, p2, p3]) assert.is(await c.neutron.deletePort(p.id, undefined), 'deleted');
    await c.close();
  });

  it('pagination: limit and marker, and the links as the server returns them', async (t) => {
    const c = client(t, 'password', 2);
    const x = `p-${randomUUID().slice(0, 8)}`;
    const made: Port[] = [];
    for (let i = 0; i < 5; i++) made.push(await createPort(t, c, `${x}-${i}`, [x]));
    const all = await c.neutron.listPorts({ tags: [x] });
    assert.equal(all.items.map((p) => p.id).sort(), made.map((p) => p.id).sort());
    assert.is(all.pages, 3);
    const first = await c.raw('GET', `/ports?tags=${x}&limit=2`);
    const page = first.body.ports as Port[];
    assert.is(page.length, 2);
    const next = (first.body.ports_links as { rel: string; href: string }[]).find((l) => l.rel === 'next');
    assert.ok(next, 'a next link on a full page');
    const q = new URL(next!.href).searchParams;
    assert.is(q.get('marker'), page[1]!.id, 'the marker is the last id of the page');
    assert.is(q.get('limit'), '2');
    const last = await c.raw('GET', `/ports?tags=${x}&limit=2&marker=${(all.items[3] as Port).id}`);
    assert.is((last.body.ports as Port[]).length, 1);
    assert.not.ok(
      ((last.body.ports_links ?? []) as { rel: string }[]).some((l) => l.rel === 'next'),
      'no next link on a page that is not full',
    );
    for (const p of made) await c.neutron.deletePort(p.id, undefined);
    await c.close();
  });

  it('revision_number moves on a tag change; DELETE with If-Match: stale 412, current 204; then 404 PortNotFound', async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `r-${randomUUID().slice(0, 8)}`);
    const r0 = (await c.neutron.getPort(p.id))!.revision_number!;
    assert.is(typeof r0, 'number');
    await c.raw('PUT', `/ports/${p.id}/tags`, { tags: ['moved'] });
    const r1 = (await c.neutron.getPort(p.id))!.revision_number!;
    assert.ok(r1 > r0, `a tag change moves revision_number (${r0} -> ${r1})`);
    const stale = await c.raw('DELETE', `/ports/${p.id}`, undefined, { 'if-match': `revision_number=${r0}` });
    assert.is(stale.status, 412);
    assert.is((stale.body.NeutronError as { type?: string })?.type, 'RevisionNumberConstraintFailed');
    assert.is(await c.neutron.deletePort(p.id, r0), 'conflict');
    assert.is(await c.neutron.deletePort(p.id, r1), 'deleted');
    const gone = await c.raw('GET', `/ports/${p.id}`);
    assert.is(gone.status, 404);
    assert.is((gone.body.NeutronError as { type?: string })?.type, 'PortNotFound');
    assert.is(await c.neutron.getPort(p.id), undefined);
    assert.is(await c.neutron.deletePort(p.id, undefined), 'gone');
    await c.close();
  });

  it("a port's groups written with If-Match: the current revision 200, a stale one 412; a group that no longer exists 404 SecurityGroupNotFound, looked up before If-Match", async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `sg-${randomUUID().slice(0, 8)}`);
    const made = await c.raw('POST', '/security-groups', {
      security_group: { name: `g-${randomUUID().slice(0, 8)}` },
    });
    assert.is(made.status, 201, made.text.slice(0, 300));
    const g = (made.body.security_group as { id: string }).id;
    const r0 = (await c.neutron.getPort(p.id))!.revision_number!;
    const base = p.security_groups ?? [];
    assert.is(await c.neutron.setPortSecurityGroups(p.id, [...base, g], r0), 'updated');
    const r1 = (await c.neutron.getPort(p.id))!.revision_number!;
    assert.ok(r1 > r0, `the write moves revision_number (${r0} -> ${r1})`);
    assert.equal((await c.neutron.getPort(p.id))!.security_groups?.sort(), [...base, g].sort());
    const stale = await c.raw(
      'PUT',
      `/ports/${p.id}`,
      { port: { security_groups: base } },
      {
        'if-match': `revision_number=${r0}`,
      },
    );
    assert.is(stale.status, 412);
    assert.is(await c.neutron.setPortSecurityGroups(p.id, base, r0), 'conflict');
    // a second group, made and deleted: the list naming it is refused whatever the revision
    const other = await c.raw('POST', '/security-groups', {
      security_group: { name: `h-${randomUUID().slice(0, 8)}` },
    });
    const h = (other.body.security_group as { id: string }).id;
    assert.is(await c.neutron.deleteSecurityGroup(h, undefined), 'deleted');
    for (const rev of [r0, r1]) {
      const gone = await c.raw(
        'PUT',
        `/ports/${p.id}`,
        { port: { security_groups: [...base, h] } },
        {
          'if-match': `revision_number=${rev}`,
        },
      );
      assert.is(gone.status, 404, `revision ${rev}: ${gone.text.slice(0, 300)}`);
      assert.is((gone.body.NeutronError as { type?: string })?.type, 'SecurityGroupNotFound');
    }
    assert.is(
      await c.neutron.setPortSecurityGroups(p.id, [...base, h], r1),
      'conflict',
      'a stale list, as on a 412',
    );
    assert.is(await c.neutron.setPortSecurityGroups(p.id, base, r1), 'updated');
    await c.neutron.deletePort(p.id, undefined);
    assert.is(await c.neutron.deleteSecurityGroup(g, undefined), 'deleted');
    await c.close();
  });

  it('409: a fixed IP that another port holds is IpAddressAlreadyAllocated', async (t) => {
    const c = client(t);
    const a = await createPort(t, c, `ip-${randomUUID().slice(0, 8)}`);
    const ip = a.fixed_ips?.[0]?.ip_address;
    assert.ok(ip, 'the port has a fixed IP');
    const r = await c.raw('POST', '/ports', {
      port: {
        name: 'same-ip',
        ...(t.networkId ? { network_id: t.networkId } : {}),
        fixed_ips: [{ ip_address: ip, ...(t.subnetId ? { subnet_id: t.subnetId } : {}) }],
      },
    });
    assert.is(r.status, 409);
    assert.is((r.body.NeutronError as { type?: string })?.type, 'IpAddressAlreadyAllocated');
    await c.neutron.deletePort(a.id, undefined);
    await c.close();
  });

  it("port security (ML2's port_security driver): on by default with the project's default group; off, no group, and a group asked with it off is 400", async (t) => {
    const c = client(t);
    const net = t.networkId ? { network_id: t.networkId } : {};
    const secured = await c.raw('POST', '/ports', {
      port: { name: `ps-${randomUUID().slice(0, 8)}`, ...net },
    });
    assert.is(secured.status, 201, secured.text.slice(0, 300));
    const a = secured.body.port as Port;
    assert.is(a.port_security_enabled, true);
    assert.is(a.security_groups?.length, 1, 'the default group');
    const groups = await c.raw('GET', `/security-groups?id=${a.security_groups![0]}`);
    assert.is((groups.body.security_groups as { name: string }[])[0]?.name, 'default');
    // as ch-k8s-lbaas makes its ports: no name, no port security, hence no group
    const open = await c.raw('POST', '/ports', { port: { ...net, port_security_enabled: false } });
    assert.is(open.status, 201, open.text.slice(0, 300));
    const b = open.body.port as Port;
    assert.is(b.port_security_enabled, false);
    assert.equal(b.security_groups, []);
    assert.is(b.name, '');
    assert.is(b.device_owner, '');
    const got = await c.neutron.getPort(b.id);
    assert.is(got?.port_security_enabled, false, 'a GET shows it too');
    const bad = await c.raw('POST', '/ports', {
      port: { ...net, port_security_enabled: false, security_groups: a.security_groups },
    });
    assert.is(bad.status, 400);
    assert.is(
      (bad.body.NeutronError as { type?: string })?.type,
      'PortSecurityAndIPRequiredForSecurityGroups',
    );
    await c.neutron.deletePort(a.id, undefined);
    await c.neutron.deletePort(b.id, undefined);
    await c.close();
  });

  it('floating IPs: created on a port, listed and got with port_id and fixed_ip_address, deleted', async (t) => {
    const c = client(t);
    const p = await createPort(t, c, `f-${randomUUID().slice(0, 8)}`);
    const r = await c.raw('POST', '/floatingips', {
      floatingip: {
        ...(t.floatingNetworkId ? { floating_network_id: t.floatingNetworkId } : {}),
        port_id: p.id,
      },
    });
    assert.is(r.status, 201, JSON.stringify(r.body).slice(0, 300));
    const fip = r.body.floatingip as FloatingIp;
    assert.is(fip.port_id, p.id);
    assert.is(fip.fixed_ip_address, p.fixed_ips?.[0]?.ip_address);
    const listed = await c.neutron.listFloatingIps({ project_id: t.projectId });
    assert.ok(listed.items.some((f) => f.id === fip.id && f.port_id === p.id));
    assert.is((await c.neutron.getFloatingIp(fip.id))?.floating_ip_address, fip.floating_ip_address);
    assert.is(
      await c.neutron.deleteFloatingIp(fip.id, (await c.neutron.getFloatingIp(fip.id))!.revision_number),
      'deleted',
    );
    assert.is(await c.neutron.deletePort(p.id, undefined), 'deleted');
    await c.close();
  });

  it('a token revoked mid-run: Neutron answers 401, the client re-authenticates once and goes on', async (t) => {
    const c = client(t);
    await c.neutron.listPorts({ project_id: t.projectId });
    const token = await c.auth.get();
    const res = await fetch(`${t.authUrl}/auth/tokens`, {
      method: 'DELETE',
      headers: { 'x-auth-token': token, 'x-subject-token': token },
    });
    assert.is(res.status, 204, 'Keystone revokes the token');
    const direct = await c.raw('GET', '/ports?limit=1');
    assert.is(direct.status, 401, 'Neutron refuses the revoked token');
    const issued = c.auth.issued;
    c.auth.invalidate = (
      (orig) => () =>
        orig.call(c.auth)
    )(c.auth.invalidate);
    // the raw call above used the cached token; the client's own call re-authenticates once
    await c.neutron.listPorts({ project_id: t.projectId });
    assert.is(c.auth.issued, issued + 1, 'one new token');
    await c.close();
  });

  it('extensions: revision-if-match and standard-attr-tag are listed', async (t) => {
    const c = client(t);
    assert.ok(await c.neutron.supports('revision-if-match'));
    assert.ok(await c.neutron.supports('standard-attr-tag'));
    await c.close();
  });

  parityCases(it, { client: (t, kind) => client(t, kind), createPort });

  test.run();
}
