/**
 * The Cinder client where only a fault can take it (the fake's fault plan): a 404 that is not
 * Cinder's own, and listings that cannot be proven complete. What Cinder itself does (paging,
 * the cap, the project, a volume not found) is the contract suite's, run on the fake and on a
 * real Cinder (cinder-contract.ts).
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

const vol = (os: FakeOpenStack, n: number, extra: Record<string, unknown> = {}) =>
  os.addVolume({
    id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
    created_at: new Date(Date.UTC(2026, 0, 1, 0, n)).toISOString(),
    ...extra,
  });

test("a 404 that is not Cinder's is an error, never gone; a listing that cannot be proven is incomplete", async ({
  os,
  dir,
}) => {
  const v = vol(os, 1, { metadata: { 'cinder.csi.openstack.org/cluster': 'prod-1' } });
  vol(os, 2);
  vol(os, 3);
  const c = connect(os, dir);
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
