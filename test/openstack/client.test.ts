/** The OpenStack client against the fake Keystone + Neutron; configuration the OpenStack way. */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { OpenStackConfigError } from '../../shared/openstack/errors.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { NeutronClient } from '../../shared/openstack/neutron.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { testTime } from '../helpers/time.ts';

const test = suite<{ os: FakeOpenStack; dir: string }>('openstack client');
test.before.each(async (ctx) => {
  ctx.os = new FakeOpenStack();
  await ctx.os.start();
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-os-'));
});
test.after.each(async (ctx) => ctx.os.stop());

function client(
  os: FakeOpenStack,
  dir: string,
  opts: { kind?: 'password' | 'appcred'; clock?: () => number; sleeps?: number[]; pageSize?: number } = {},
) {
  writeFileSync(join(dir, 'clouds.yaml'), os.cloudsYaml(opts.kind ?? 'appcred'));
  const cloud = loadCloudConfig({ OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') });
  const time = testTime(opts.clock, opts.sleeps);
  const http = new Http({ timeoutMs: 2000, time });
  const auth = new KeystoneAuth(cloud, http, time.now);
  return { auth, neutron: new NeutronClient(auth, http, opts.pageSize ?? 2), close: () => http.close() };
}

test('password and application-credential auth; the token is cached and renewed before expiry', async ({
  dir,
}) => {
  let now = Date.now();
  const os = new FakeOpenStack({ now: () => now });
  await os.start();
  for (const kind of ['password', 'appcred'] as const) {
    const c = client(os, dir, { kind, clock: () => now });
    os.addPort({ tags: ['x'] });
    await c.neutron.listPorts({});
    await c.neutron.listPorts({});
    assert.is(c.auth.issued, 1, `${kind}: one token for many calls`);
    now += os.tokenTtlMs - 30_000; // inside the renewal margin
    await c.neutron.listPorts({});
    assert.is(c.auth.issued, 2, `${kind}: renewed before expires_at`);
    await c.close();
  }
  await os.stop();
});

test('a 401 mid-run re-authenticates once', async ({ os, dir }) => {
  const c = client(os, dir);
  for (let i = 0; i < 5; i++) os.addPort({});
  await c.neutron.listPorts({});
  os.tokens.clear(); // the token expired or was revoked
  const r = await c.neutron.listPorts({});
  assert.is(r.items.length, 5);
  assert.is(c.auth.issued, 2);
  os.faults.add({ path: '/network/v2.0/ports', status: 401 });
  try {
    await c.neutron.listPorts({});
    assert.unreachable('a persistent 401 must fail');
  } catch (err) {
    assert.match((err as Error).message, /401/);
  }
  await c.close();
});

test('pagination: limit/marker with links, and deployments without pagination', async ({ os, dir }) => {
  const c = client(os, dir, { pageSize: 2 });
  for (let i = 0; i < 7; i++) os.addPort({ tags: ['t1', i % 2 ? 't2' : 't3'] });
  const all = await c.neutron.listPorts({ tags: ['t1'] });
  assert.is(all.items.length, 7);
  assert.is(all.pages, 4);
  assert.is((await c.neutron.listPorts({ tags: ['t1', 't2'] })).items.length, 3);
  os.pagination = false;
  const flat = await c.neutron.listPorts({});
  assert.is(flat.items.length, 7);
  assert.is(flat.pages, 1);
  os.pagination = true;
  os.faults.add({ path: /\/ports\?.*marker=/, nth: 1, emptyPage: true });
  await rejects(
    () => c.neutron.listPorts({}),
    /list incomplete: a page with a next link has no items/,
    'an empty page that says more follows cannot be proven',
  );
  await c.close();
});

async function rejects(fn: () => Promise<unknown>, re: RegExp, what: string): Promise<void> {
  let err: unknown;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof Error, `${what}: expected an error`);
  assert.match((err as Error).message, re, what);
}

type Page = {
  ports: { id: string; revision_number?: unknown }[];
  ports_links?: { rel: string; href: string }[];
};
const rewritePage = (f: (p: Page) => void) => (status: number, body: unknown) => {
  const p = structuredClone(body) as Page;
  f(p);
  return [status, p] as [number, unknown];
};

test('a listing is proven page by page: marker, ids, revision numbers; a next link never redirects the token', async ({
  os,
  dir,
}) => {
  const c = client(os, dir, { pageSize: 2 });
  for (let i = 0; i < 5; i++) os.addPort({ tags: ['t'] });
  // Neutron builds next links from the Host header: behind a proxy they name another host.
  os.faults.add({
    method: 'GET',
    path: /\/ports\?/,
    nth: 1,
    rewrite: rewritePage((p) => {
      for (const l of p.ports_links ?? []) l.href = l.href.replace(/^http:\/\/[^/]+/, 'http://127.0.0.9:1');
    }),
  });
  const all = await c.neutron.listPorts({ tags: ['t'] });
  assert.is(all.items.length, 5);
  assert.ok(
    os.requests.filter((r) => r.path.endsWith('/ports')).every((r) => r.query.includes('tags=t')),
    "every page went to the catalog endpoint with this request's own filters",
  );
  const broken: [string, (p: Page) => void, RegExp][] = [
    [
      'marker that is not the last id',
      (p) => {
        p.ports_links![0]!.href = p.ports_links![0]!.href.replace(/marker=[^&]+/, 'marker=zzz');
      },
      /marker zzz is not the page's last id/,
    ],
    [
      'no marker',
      (p) => {
        p.ports_links![0]!.href = p.ports_links![0]!.href.replace(/marker=[^&]+/, '');
      },
      /no marker/,
    ],
    ['an id twice', (p) => void p.ports.push(p.ports[0]!), /came twice/],
    [
      'an item without id',
      (p) => {
        p.ports[0]!.id = '';
      },
      /has no id/,
    ],
    [
      'revision_number not a count',
      (p) => {
        p.ports[0]!.revision_number = '3';
      },
      /not a count/,
    ],
    [
      'links not a list',
      (p) => {
        (p as unknown as Record<string, unknown>).ports_links = 'x';
      },
      /not a list/,
    ],
  ];
  for (const [what, f, re] of broken) {
    os.faults.clear();
    os.faults.add({ method: 'GET', path: /\/ports\?/, nth: 1, rewrite: rewritePage(f) });
    await rejects(() => c.neutron.listPorts({ tags: ['t'] }), re, what);
  }
  os.faults.clear();
  os.faults.add({ method: 'GET', path: /\/ports\?/, nth: 1, rewrite: (s) => [s, ''] });
  await rejects(() => c.neutron.listPorts({}), /not a JSON object/, 'an empty body is not an empty list');
  await c.close();
});

test('a GET is the object or Neutron\'s own NotFound; anything else is an error, never "gone"', async ({
  os,
  dir,
}) => {
  const c = client(os, dir);
  const p = os.addPort({});
  const cases: [string, (s: number, b: unknown) => [number, unknown]][] = [
    ['200 with an empty body', (s) => [s, '']],
    ['200 with another port', (s, b) => [s, { port: { ...(b as { port: object }).port, id: 'other' } }]],
    ['200 without the port', (s) => [s, {}]],
    ['a bare 404', () => [404, '']],
    ['a 404 of a router', () => [404, { error: { message: 'not found' } }]],
  ];
  for (const [what, rewrite] of cases) {
    os.faults.clear();
    os.faults.add({ method: 'GET', path: `/ports/${p.id}`, rewrite });
    await rejects(() => c.neutron.getPort(p.id), /neutron get port/, what);
  }
  os.faults.clear();
  assert.is((await c.neutron.getPort(p.id))?.id, p.id);
  assert.is(await c.neutron.getPort('no-such-port'), undefined, 'PortNotFound is absent');
  os.faults.add({ method: 'DELETE', path: `/ports/${p.id}`, rewrite: () => [404, ''] });
  await rejects(
    () => c.neutron.deletePort(p.id, undefined),
    /neutron delete port/,
    'a bare 404 is not "gone"',
  );
  await c.close();
});

test('DELETE with If-Match only when revision-if-match exists; 412 is a conflict, 404 gone', async ({
  os,
  dir,
}) => {
  const c = client(os, dir);
  const p = os.addPort({});
  os.update(p, { device_id: 'vm-1' });
  assert.is(await c.neutron.deletePort(p.id, 1), 'conflict');
  assert.ok(os.ports.has(p.id));
  assert.is(await c.neutron.deletePort(p.id, 2), 'deleted');
  assert.is(await c.neutron.deletePort(p.id, 2), 'gone');
  await c.close();
  os.extensions = os.extensions.filter((e) => e !== 'revision-if-match');
  const c2 = client(os, dir);
  const q = os.addPort({});
  // A conditional delete where Neutron cannot honour If-Match is refused, never sent without it.
  const before = os.requests.filter((r) => r.method === 'DELETE').length;
  const refused = await c2.neutron.deletePort(q.id, 7).then(
    () => 'sent',
    (err: Error) => err.message,
  );
  assert.match(refused, /revision-if-match/);
  assert.is(os.requests.filter((r) => r.method === 'DELETE').length, before, 'nothing was sent');
  assert.ok(os.ports.has(q.id), 'the port is still there');
  assert.is(
    await c2.neutron.deletePort(q.id, undefined),
    'deleted',
    'an unconditional delete, asked for, carries no If-Match (it would be a 400)',
  );
  assert.not.ok(os.requests.some((r) => r.method === 'DELETE' && r.status === 400));
  await c2.close();
});

test('the client sends no If-Match but one `revision_number=<count>`: any other revision is refused before sending (Neutron would delete on a malformed one)', async ({
  os,
  dir,
}) => {
  const c = client(os, dir);
  await fc.assert(
    fc.asyncProperty(
      fc.oneof(
        fc.nat(),
        fc.integer({ min: -1000, max: -1 }),
        fc.double(),
        fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53),
        fc.string(),
      ),
      async (revision) => {
        const p = os.addPort({});
        const sent = os.deleteIfMatch.length;
        const r = await c.neutron.deletePort(p.id, revision as number).then(
          (x) => x,
          (err: Error) => `refused: ${err.message}`,
        );
        const header = os.deleteIfMatch.slice(sent);
        if (header.length === 0) {
          assert.match(r, /^refused: .*not a count.*not sent/);
          assert.ok(os.ports.has(p.id), 'nothing deleted');
        } else {
          assert.is(header.length, 1);
          assert.match(header[0] ?? '', /^revision_number=\d+$/, `sent ${header[0]}`);
          assert.ok(Number.isSafeInteger(revision) && (revision as number) >= 0);
        }
        os.ports.delete(p.id);
      },
    ),
    { numRuns: 150 },
  );
  await c.close();
});

test('reads retry 5xx and 429 with backoff, honouring Retry-After; deletes are not retried', async ({
  os,
  dir,
}) => {
  const sleeps: number[] = [];
  const c = client(os, dir, { sleeps });
  os.addPort({});
  os.faults.add({ method: 'GET', path: '/ports', nth: 1, status: 429, retryAfterSeconds: 3 });
  os.faults.add({ method: 'GET', path: '/ports', nth: 2, status: 503 });
  assert.is((await c.neutron.listPorts({})).items.length, 1);
  assert.equal(sleeps, [3000, 400]);
  const p = os.addPort({});
  os.faults.add({ method: 'DELETE', path: '/ports/', status: 503 });
  try {
    await c.neutron.deletePort(p.id, 1);
    assert.unreachable();
  } catch (err) {
    assert.match((err as Error).message, /503/);
  }
  assert.is(os.requests.filter((r) => r.method === 'DELETE').length, 1);
  await c.close();
});

test('credentials never appear in errors', async ({ os, dir }) => {
  writeFileSync(
    join(dir, 'clouds.yaml'),
    os.cloudsYaml('password').replace('fake-password', 'wrong-secret-password'),
  );
  const cloud = loadCloudConfig({ OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') });
  const http = new Http({ timeoutMs: 2000, time: testTime() });
  const n = new NeutronClient(new KeystoneAuth(cloud, http, Date.now), http);
  try {
    await n.listPorts({});
    assert.unreachable();
  } catch (err) {
    const text = `${(err as Error).message} ${JSON.stringify(err)} ${(err as Error).stack}`;
    assert.match(text, /keystone issue token: 401/);
    assert.not.ok(text.includes('wrong-secret-password'));
  }
  await http.close();
});

const cfg = suite<{ dir: string }>('openstack configuration');
cfg.before.each((ctx) => {
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-oscfg-'));
});

cfg('clouds.yaml from ./ with secure.yaml merged; OS_CLOUD selects; region and interface', ({ dir }) => {
  writeFileSync(
    join(dir, 'clouds.yaml'),
    'clouds:\n  prod:\n    region_name: R2\n    interface: internal\n    auth:\n      auth_url: https://keystone.example:5000/v3\n      username: svc\n      user_domain_name: Default\n      project_id: p-1\n',
  );
  writeFileSync(join(dir, 'secure.yaml'), 'clouds:\n  prod:\n    auth:\n      password: s3cret\n');
  const c = loadCloudConfig({ OS_CLOUD: 'prod' }, { cwd: dir });
  assert.is(c.authType, 'password');
  assert.is(c.password, 's3cret');
  assert.is(c.regionName, 'R2');
  assert.is(c.interface, 'internal');
  assert.match(c.source, /secure\.yaml/);
});

cfg('OS_* environment without clouds.yaml', () => {
  const c = loadCloudConfig({
    OS_AUTH_URL: 'https://k:5000/v3',
    OS_AUTH_TYPE: 'v3applicationcredential',
    OS_APPLICATION_CREDENTIAL_ID: 'id',
    OS_APPLICATION_CREDENTIAL_SECRET: 'sec',
  });
  assert.is(c.authType, 'v3applicationcredential');
  assert.is(c.applicationCredentialId, 'id');
});

cfg('missing or contradictory configuration names the key and never the secret', ({ dir }) => {
  const bad = (env: Record<string, string>, re: RegExp) => {
    try {
      loadCloudConfig(env, { cwd: dir });
      assert.unreachable(JSON.stringify(env));
    } catch (err) {
      assert.instance(err, OpenStackConfigError);
      assert.match((err as Error).message, re);
      assert.not.ok((err as Error).message.includes('topsecret'));
    }
  };
  bad({}, /set OS_CLOUD/);
  bad({ OS_CLOUD: 'nope' }, /no clouds\.yaml found/);
  bad(
    { OS_AUTH_URL: 'https://k/v3', OS_USERNAME: 'u', OS_USER_DOMAIN_NAME: 'D', OS_PROJECT_ID: 'p' },
    /`auth\.password` is required/,
  );
  bad(
    {
      OS_AUTH_URL: 'https://k/v3',
      OS_AUTH_TYPE: 'v3applicationcredential',
      OS_APPLICATION_CREDENTIAL_ID: 'i',
      OS_APPLICATION_CREDENTIAL_SECRET: 'topsecret',
      OS_PASSWORD: 'topsecret',
    },
    /`auth\.password` contradicts/,
  );
  bad(
    {
      OS_AUTH_URL: 'https://k/v3',
      OS_AUTH_TYPE: 'v3applicationcredential',
      OS_APPLICATION_CREDENTIAL_ID: 'i',
      OS_APPLICATION_CREDENTIAL_SECRET: 'topsecret',
      OS_PROJECT_ID: 'p',
    },
    /already: remove `auth\.project_id`/,
  );
  bad({ OS_AUTH_URL: 'not a url', OS_USERNAME: 'u', OS_PASSWORD: 'topsecret' }, /`auth\.auth_url`/);
  bad({ OS_AUTH_URL: 'https://k/v3', OS_AUTH_TYPE: 'token', OS_PASSWORD: 'topsecret' }, /`auth_type`/);
  mkdirSync(join(dir, 'x'));
  writeFileSync(join(dir, 'x', 'clouds.yaml'), 'clouds:\n  a: {}\n');
  bad(
    { OS_CLOUD: 'b', OS_CLIENT_CONFIG_FILE: join(dir, 'x', 'clouds.yaml') },
    /clouds\.b not found .*known: a/,
  );
});

test.run();
cfg.run();
