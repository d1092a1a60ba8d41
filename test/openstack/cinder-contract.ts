/**
 * One Cinder contract suite (Block Storage API v3), run against the fake's Cinder
 * (cinder-contract.fake.test.ts) and a real Cinder from Debian's packages
 * (cinder-contract.real.test.ts): what the Cinder client and the cinder-csi-volumes pack rely
 * on. A behaviour only the fake has is a bug in the fake.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { CinderClient } from '../../shared/openstack/cinder.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { testTime } from '../helpers/time.ts';

export type CinderTarget = Readonly<{
  name: 'fake' | 'real';
  /** A clouds.yaml with one cloud `contract`: a member of the project, or an admin of another. */
  cloudsYaml: (kind: 'member' | 'admin') => string;
  projectId: string;
  adminProjectId: string;
  /** osapi_max_limit of this Cinder. */
  maxLimit: number;
  /** Makes a volume (in the admin's project with `admin`) and returns it once available. */
  makeVolume: (o?: { metadata?: Record<string, string>; admin?: boolean }) => Promise<{ id: string }>;
  /** The paths the server was asked, where it records them (the fake). */
  paths?: () => string[];
  /** Removes every volume this target made (between cases). */
  reset: () => Promise<void>;
  close: () => Promise<void>;
}>;

type Client = {
  auth: KeystoneAuth;
  cinder: CinderClient;
  raw: (
    path: string,
    project?: string,
  ) => Promise<{ status: number; body: Record<string, unknown>; text: string }>;
  close: () => Promise<void>;
};

function client(t: CinderTarget, kind: 'member' | 'admin', pageSize = 2): Client {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cinder-contract-'));
  writeFileSync(join(dir, 'clouds.yaml'), t.cloudsYaml(kind));
  const cloud = loadCloudConfig({ OS_CLOUD: 'contract', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') });
  const http = new Http({ timeoutMs: 30_000, time: testTime() });
  const auth = new KeystoneAuth(cloud, http, Date.now);
  const raw: Client['raw'] = async (path, project) => {
    let base = await auth.endpoint('block-storage');
    if (project) base = base.replace(/\/v3\/[^/]+$/, `/v3/${project}`);
    const r = await fetch(`${base}${path}`, { headers: { 'x-auth-token': await auth.get() } });
    const text = await r.text();
    let body: Record<string, unknown> = {};
    try {
      body = JSON.parse(text) as Record<string, unknown>;
    } catch {
      /* not JSON */
    }
    return { status: r.status, body, text };
  };
  return { auth, cinder: new CinderClient(auth, http, pageSize), raw, close: () => http.close() };
}

type Listed = { id: string; created_at: string };
const volumesOf = (b: Record<string, unknown>) => (b.volumes ?? []) as Listed[];
/** Cinder's default order: created_at, then id, both descending. */
const newestFirst = (vs: Listed[]) =>
  [...vs]
    .sort((a, b) => b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id))
    .map((v) => v.id);

export function cinderContract(name: string, make: (() => Promise<CinderTarget>) | undefined): void {
  const test = suite<{ t: CinderTarget }>(`Cinder contract: ${name}`);
  if (!make) {
    test.run();
    return;
  }
  test.before(async (ctx) => {
    ctx.t = await make();
  });
  test.after(async (ctx) => ctx.t?.close());
  test.after.each(async (ctx) => ctx.t.reset());

  test('paging as Cinder pages: newest first; a full page has a next link (to /volumes/detail, marker its last id) even when nothing follows; an empty or short page has no links key; the client reads every page', async ({
    t,
  }) => {
    for (let n = 0; n < 4; n++) await t.makeVolume();
    const c = client(t, 'member');
    const all = await c.raw('/volumes/detail');
    const order = newestFirst(volumesOf(all.body));
    assert.is(order.length, 4);
    assert.equal(
      volumesOf(all.body).map((v) => v.id),
      order,
      'newest first (created_at, then id)',
    );
    const p1 = await c.raw('/volumes/detail?limit=2');
    assert.equal(
      volumesOf(p1.body).map((v) => v.id),
      order.slice(0, 2),
    );
    const next = (p1.body.volumes_links as { rel: string; href: string }[])[0]!;
    assert.is(next.rel, 'next');
    const href = new URL(next.href);
    assert.match(href.pathname, /\/volumes\/detail$/, 'the link names the listing asked');
    assert.is(href.searchParams.get('marker'), order[1]);
    const p2 = await c.raw(`/volumes/detail?limit=2&marker=${order[1]}`);
    assert.equal(
      volumesOf(p2.body).map((v) => v.id),
      order.slice(2),
    );
    assert.ok(p2.body.volumes_links, 'a full last page still has a next link');
    const p3 = await c.raw(`/volumes/detail?limit=2&marker=${order[3]}`);
    assert.equal(p3.body.volumes, []);
    assert.not.ok('volumes_links' in p3.body, 'an empty page has no links key');
    const three = await c.raw(`/volumes/detail?limit=3&marker=${order[0]}`);
    assert.is(volumesOf(three.body).length, 3);
    assert.ok(three.body.volumes_links, 'three of limit three: full');
    const shorter = await c.raw('/volumes/detail?limit=5');
    assert.not.ok('volumes_links' in shorter.body, 'four of limit five: no links key');
    const listed = await c.cinder.listVolumes({ project_id: t.projectId });
    assert.equal(
      listed.items.map((v) => v.id),
      order,
    );
    assert.is(listed.pages, 3, 'two full pages and the empty one');
    if (t.paths)
      assert.ok(
        t
          .paths()
          .filter((p) => p.includes('/volumes'))
          .every((p) => !p.endsWith('/volumes')),
        'the client stays on /volumes/detail',
      );
    await c.close();
  });

  test('limit: capped at osapi_max_limit, the capped page full (a next link); not an integer or negative is 400; an unknown marker is the 404 of that volume; the client asks more than the cap and still reads all', async ({
    t,
  }) => {
    for (let n = 0; n <= t.maxLimit; n++) await t.makeVolume();
    const c = client(t, 'member');
    const big = await c.raw(`/volumes/detail?limit=${t.maxLimit * 5}`);
    assert.is(volumesOf(big.body).length, t.maxLimit);
    assert.ok(big.body.volumes_links, 'the capped page is full: next');
    const notInt = await c.raw('/volumes/detail?limit=x');
    assert.is(notInt.status, 400);
    assert.match(notInt.text, /limit param must be an integer/);
    const negative = await c.raw('/volumes/detail?limit=-1');
    assert.is(negative.status, 400);
    assert.match(negative.text, /limit param must be positive/);
    const gone = await c.raw('/volumes/detail?marker=nope');
    assert.is(gone.status, 404);
    assert.match(JSON.stringify(gone.body.itemNotFound), /Volume nope could not be found/);
    const wide = client(t, 'member', t.maxLimit * 2);
    const all = await wide.cinder.listVolumes({ project_id: t.projectId });
    assert.is(all.items.length, t.maxLimit + 1);
    assert.is(new Set(all.items.map((v) => v.id)).size, t.maxLimit + 1);
    await c.close();
    await wide.close();
  });

  test("the token's project only: a URL naming another is 400; the project shows to its readers; the client keeps the asked project's volumes", async ({
    t,
  }) => {
    const mine = await t.makeVolume();
    const theirs = await t.makeVolume({ admin: true });
    const c = client(t, 'member');
    const other = await c.raw('/volumes/detail', t.adminProjectId);
    assert.is(other.status, 400);
    assert.match(other.text, /Malformed request url/);
    const member = await c.raw('/volumes/detail');
    assert.equal(
      volumesOf(member.body).map((v) => v.id),
      [mine.id],
    );
    assert.is(
      (volumesOf(member.body)[0] as Record<string, unknown>)['os-vol-tenant-attr:tenant_id'],
      t.projectId,
      "the project's readers see it (Zed's policy)",
    );
    const listed = await c.cinder.listVolumes({ project_id: t.projectId });
    assert.equal(
      listed.items.map((v) => [v.id, v.project_id]),
      [[mine.id, t.projectId]],
    );
    assert.equal(
      (await c.cinder.listVolumes({ project_id: t.adminProjectId })).items,
      [],
      "not the token's project: none",
    );
    const admin = client(t, 'admin');
    const seen = await admin.raw('/volumes/detail');
    assert.equal(
      volumesOf(seen.body).map((v) => v.id),
      [theirs.id],
      "an admin's listing is its own project's (no all_tenants)",
    );
    assert.is(
      (volumesOf(seen.body)[0] as Record<string, unknown>)['os-vol-tenant-attr:tenant_id'],
      t.adminProjectId,
    );
    assert.equal(
      (await admin.cinder.listVolumes({ project_id: t.adminProjectId })).items.map((v) => v.id),
      [theirs.id],
    );
    await c.close();
    await admin.close();
  });

  test("one volume: its metadata as written; a volume that is not there is Cinder's 404 itemNotFound, which the client reads as gone", async ({
    t,
  }) => {
    const v = await t.makeVolume({ metadata: { 'cinder.csi.openstack.org/cluster': 'prod-1' } });
    const c = client(t, 'member');
    assert.equal((await c.cinder.getVolume(v.id))?.metadata, {
      'cinder.csi.openstack.org/cluster': 'prod-1',
    });
    const missing = '00000000-0000-4000-8000-999999999999';
    const raw = await c.raw(`/volumes/${missing}`);
    assert.is(raw.status, 404);
    assert.match(JSON.stringify(raw.body.itemNotFound), new RegExp(`Volume ${missing} could not be found`));
    assert.is(await c.cinder.getVolume(missing), undefined);
    await c.close();
  });

  test.run();
}
