/**
 * The fake's Cinder held to Cinder's documented behaviour (Block Storage API v3; Cinder 21,
 * Zed: cinder/api/common.py, api/v2/views/volumes.py, api/openstack/wsgi.py), and the Cinder
 * client against it: listings proven page by page, the project only, a volume not found.
 * No real Cinder runs here: these cases pin the fake to what Cinder's code does, so a rule
 * tested on the fake sees what it would see on a cloud.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { ListIncompleteError } from '../../shared/errors.ts';
import { CinderClient } from '../../shared/openstack/cinder.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { MAX_LIMIT } from '../../shared/sandbox/openstack/cinder-rules.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { testTime } from '../helpers/time.ts';

const test = suite<{ os: FakeOpenStack; dir: string }>(
  'cinder (fake held to the documented API) and its client',
);
test.before.each(async (ctx) => {
  ctx.os = new FakeOpenStack();
  await ctx.os.start();
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-cinder-'));
});
test.after.each(async (ctx) => ctx.os.stop());

function connect(os: FakeOpenStack, dir: string, kind: 'appcred' | 'admin' = 'appcred', pageSize = 2) {
  writeFileSync(join(dir, 'clouds.yaml'), os.cloudsYaml(kind));
  const cloud = loadCloudConfig({ OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') });
  const time = testTime();
  const http = new Http({ timeoutMs: 2000, time });
  const auth = new KeystoneAuth(cloud, http, time.now);
  return { auth, http, cinder: new CinderClient(auth, http, pageSize) };
}

/** A raw GET with the client's token, at a path under the catalog's block-storage endpoint. */
async function raw(c: ReturnType<typeof connect>, path: string) {
  const base = await c.auth.endpoint('block-storage');
  const r = await fetch(`${base}${path}`, { headers: { 'x-auth-token': await c.auth.get() } });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
}

const vol = (os: FakeOpenStack, n: number, extra: Record<string, unknown> = {}) =>
  os.addVolume({
    id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
    created_at: new Date(Date.UTC(2026, 0, 1, 0, n)).toISOString(),
    ...extra,
  });

test('paging as Cinder pages: newest first; a full page has a next link (to /volumes, marker its last id) even when nothing follows; a short page has no links key', async ({
  os,
  dir,
}) => {
  for (let n = 1; n <= 4; n++) vol(os, n);
  const c = connect(os, dir);
  const p1 = await raw(c, '/volumes/detail?limit=2');
  const ids = (p: { body: Record<string, unknown> }) =>
    (p.body.volumes as { id: string }[]).map((v) => v.id.slice(-1));
  assert.equal(ids(p1), ['4', '3'], 'newest first');
  const next = (p1.body.volumes_links as { rel: string; href: string }[])[0]!;
  assert.is(next.rel, 'next');
  const href = new URL(next.href);
  assert.match(href.pathname, /\/volumes$/, 'the link names the collection, not /detail');
  assert.is(href.searchParams.get('marker'), (p1.body.volumes as { id: string }[])[1]!.id);
  const p2 = await raw(c, `/volumes/detail?limit=2&marker=${href.searchParams.get('marker')}`);
  assert.equal(ids(p2), ['2', '1']);
  assert.ok(p2.body.volumes_links, 'a full last page still has a next link');
  const last = (p2.body.volumes as { id: string }[])[1]!.id;
  const p3 = await raw(c, `/volumes/detail?limit=2&marker=${last}`);
  assert.equal(p3.body.volumes, []);
  assert.not.ok('volumes_links' in p3.body, 'an empty page has no links key');
  const short = await raw(
    c,
    `/volumes/detail?limit=3&marker=${(p1.body.volumes as { id: string }[])[0]!.id}`,
  );
  assert.is((short.body.volumes as unknown[]).length, 3);
  assert.ok(short.body.volumes_links, 'three of limit three: full');
  const shorter = await raw(c, '/volumes/detail?limit=5');
  assert.not.ok('volumes_links' in shorter.body, 'four of limit five: no links key');
  // the client: every volume, over the pages, the empty one included
  const all = await c.cinder.listVolumes({ project_id: 'project-a' });
  assert.equal(
    all.items.map((v) => v.id.slice(-1)),
    ['4', '3', '2', '1'],
  );
  assert.is(all.pages, 3);
  assert.ok(
    os.requests.filter((r) => r.path.includes('/volumes')).every((r) => !r.path.endsWith('/volumes')),
    'the client stays on /volumes/detail: only the marker is taken from the link',
  );
  await c.http.close();
});

test('limit: capped at osapi_max_limit (1000); not an integer or negative is 400; an unknown marker is the 404 of that volume', async ({
  os,
  dir,
}) => {
  for (let n = 1; n <= MAX_LIMIT + 1; n++) vol(os, n);
  const c = connect(os, dir);
  const big = await raw(c, '/volumes/detail?limit=5000');
  assert.is((big.body.volumes as unknown[]).length, MAX_LIMIT);
  assert.ok(big.body.volumes_links, 'the capped page is full: next');
  assert.is((await raw(c, '/volumes/detail?limit=x')).status, 400);
  assert.is((await raw(c, '/volumes/detail?limit=-1')).status, 400);
  const gone = await raw(c, '/volumes/detail?marker=nope');
  assert.is(gone.status, 404);
  assert.match(JSON.stringify(gone.body.itemNotFound), /Volume nope could not be found/);
  const all = await connect(os, dir, 'appcred', 400).cinder.listVolumes({ project_id: 'project-a' });
  assert.is(all.items.length, MAX_LIMIT + 1);
  await c.http.close();
});

test("the token's project only: a URL naming another is 400; the project shows to admins only; the client keeps the asked project's volumes", async ({
  os,
  dir,
}) => {
  vol(os, 1);
  vol(os, 2, { project_id: 'admin-project' });
  const c = connect(os, dir);
  const other = await fetch(`${os.url}/volume/v3/admin-project/volumes/detail`, {
    headers: { 'x-auth-token': await c.auth.get() },
  });
  assert.is(other.status, 400);
  assert.match(await other.text(), /Malformed request url/);
  const member = await raw(c, '/volumes/detail');
  assert.is((member.body.volumes as unknown[]).length, 1);
  assert.not.ok('os-vol-tenant-attr:tenant_id' in (member.body.volumes as object[])[0]!);
  const mine = await c.cinder.listVolumes({ project_id: 'project-a' });
  assert.equal(
    mine.items.map((v) => [v.id.slice(-1), v.project_id]),
    [['1', 'project-a']],
  );
  assert.equal(
    (await c.cinder.listVolumes({ project_id: 'admin-project' })).items,
    [],
    "not the token's project: none",
  );
  const admin = connect(os, dir, 'admin');
  const seen = await raw(admin, '/volumes/detail');
  assert.is(
    (seen.body.volumes as Record<string, unknown>[])[0]!['os-vol-tenant-attr:tenant_id'],
    'admin-project',
  );
  assert.equal(
    (await admin.cinder.listVolumes({ project_id: 'admin-project' })).items.map((v) => v.id.slice(-1)),
    ['2'],
  );
  await c.http.close();
  await admin.http.close();
});

test("one volume: 404 itemNotFound is gone; a 404 that is not Cinder's is an error; a listing that cannot be proven is incomplete", async ({
  os,
  dir,
}) => {
  const v = vol(os, 1, { metadata: { 'cinder.csi.openstack.org/cluster': 'prod-1' } });
  vol(os, 2);
  vol(os, 3);
  const c = connect(os, dir);
  assert.equal((await c.cinder.getVolume(v.id))?.metadata, { 'cinder.csi.openstack.org/cluster': 'prod-1' });
  assert.is(await c.cinder.getVolume('00000000-0000-4000-8000-999999999999'), undefined);
  os.faults.add({ method: 'GET', path: /\/volumes\/0000/, rewrite: () => [404, { message: 'proxy' }] });
  try {
    await c.cinder.getVolume(v.id);
    assert.unreachable('a 404 without itemNotFound');
  } catch (err) {
    assert.match((err as Error).message, /404/);
  }
  os.faults.clear();
  const broken: [
    string,
    (b: { volumes: { id: string }[]; volumes_links?: { href: string }[] }) => void,
    RegExp,
  ][] = [
    [
      'marker moved',
      (b) => {
        for (const l of b.volumes_links ?? []) l.href = l.href.replace(/marker=[^&]+/, 'marker=elsewhere');
      },
      /marker elsewhere is not the page's last id/,
    ],
    ['an id twice', (b) => b.volumes.push({ ...b.volumes[0]! }), /came twice/],
    ['no list', (b) => delete (b as { volumes?: unknown }).volumes, /no volumes list/],
  ];
  for (const [what, f, re] of broken) {
    os.faults.clear();
    os.faults.add({
      method: 'GET',
      path: /\/volumes\/detail/,
      nth: 1,
      rewrite: (s, b) => {
        const copy = structuredClone(b) as Parameters<typeof f>[0];
        f(copy);
        return [s, copy];
      },
    });
    try {
      await c.cinder.listVolumes({ project_id: 'project-a' });
      assert.unreachable(what);
    } catch (err) {
      assert.instance(err, ListIncompleteError, what);
      assert.match((err as Error).message, re, what);
    }
  }
  await c.http.close();
});

test.run();
