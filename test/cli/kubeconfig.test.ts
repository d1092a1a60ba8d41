/**
 * Kubeconfig users as kubectl reads them: `tokenFile` (which the client library ignores) read
 * and trimmed, a token file's trailing newline never sent, and a user entry whose fields
 * twopass would drop (impersonation, a typo) refused, never run as another identity.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ConfigError } from '../../shared/errors.ts';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { kubeOptionsFromConfig } from '../../shared/kube/kubeconfig.ts';
import { testTime } from '../helpers/time.ts';

const dir = mkdtempSync(join(tmpdir(), 'twopass-kubeconfig-'));
const kubeconfig = (name: string, user: string): string => {
  const path = join(dir, name);
  writeFileSync(
    path,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: c',
      '  cluster: { server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true }',
      'users:',
      '- name: u',
      `  user: ${user}`,
      'contexts:',
      '- name: x',
      '  context: { cluster: c, user: u }',
      'current-context: x',
      '',
    ].join('\n'),
  );
  return path;
};
const refusal = async (path: string): Promise<string> =>
  kubeOptionsFromConfig(path).then(
    () => assert.unreachable('accepted') as never,
    (err: Error) => err.message,
  );

test("kubectl's tokenFile is read, its newline trimmed, and sent as the bearer token", async () => {
  const tokenPath = join(dir, 'token');
  writeFileSync(tokenPath, 'sa-token-123\n');
  const o = await kubeOptionsFromConfig(kubeconfig('tf.yaml', `{ tokenFile: "${tokenPath}" }`));
  assert.is(o.headers?.Authorization, 'Bearer sa-token-123');
});

test("the client library's token-file keeps no newline in the header either", async () => {
  const tokenPath = join(dir, 'token2');
  writeFileSync(tokenPath, 'sa-token-456\n');
  const o = await kubeOptionsFromConfig(kubeconfig('tf2.yaml', `{ token-file: "${tokenPath}" }`));
  assert.is(o.headers?.Authorization, 'Bearer sa-token-456');
});

test('a token file that cannot be read, or is empty, is said, never an unauthenticated run', async () => {
  assert.match(
    await refusal(kubeconfig('tf3.yaml', `{ tokenFile: "${join(dir, 'nope')}" }`)),
    /user `u`: token file .*nope: does not exist/,
  );
  const empty = join(dir, 'empty');
  writeFileSync(empty, '\n');
  assert.match(await refusal(kubeconfig('tf4.yaml', `{ tokenFile: "${empty}" }`)), /token file .* is empty/);
});

test('a plain http:// server is refused in words that say why', async () => {
  const path = join(dir, 'http.yaml');
  writeFileSync(
    path,
    'clusters:\n- name: c\n  cluster: { server: "http://127.0.0.1:9" }\nusers:\n- name: u\n  user: { token: t }\ncontexts:\n- name: x\n  context: { cluster: c, user: u }\ncurrent-context: x\n',
  );
  const why = await refusal(path);
  assert.match(why, /is plain HTTP \(http:\/\/127\.0\.0\.1:9\): its credentials would travel unencrypted/);
  assert.not.match(why, /skipTLSVerify is not set/);
});

test('impersonation, or a field twopass does not understand, is refused rather than dropped', async () => {
  assert.match(
    await refusal(kubeconfig('as.yaml', '{ token: t, as: someone-else }')),
    /user `u`: `as` is not understood here \(impersonation would be dropped/,
  );
  assert.match(await refusal(kubeconfig('typo.yaml', '{ tokn: t }')), /`tokn` is not understood here/);
});

test('a server that answers 404 to everything is said not to be a Kubernetes API server (exit 2), not "is DANM installed?"', async () => {
  const server = createServer((_q, s) => {
    s.writeHead(404, { 'content-type': 'text/plain' });
    s.end('404 page not found');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const kube = new KubeHttpClient({ server: url, time: testTime() });
  try {
    const err = await kube.serves('danm.k8s.io', 'v1', 'danmeps').then(
      () => undefined,
      (e: Error) => e,
    );
    assert.instance(err, ConfigError);
    assert.match(String(err?.message), /answers 404 to the core API .*not a Kubernetes API server/);
  } finally {
    await kube.close();
    server.close();
  }
});

test('a server that answers 200 to everything, with JSON or a web page, is said not to be Kubernetes (a ConfigError), on discovery and on a list', async () => {
  for (const [type, body] of [
    ['application/json', '{"ok":true}'],
    ['text/html', '<html><body>sign in</body></html>'],
  ] as const) {
    const server = createServer((_q, s) => {
      s.writeHead(200, { 'content-type': type });
      s.end(body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const kube = new KubeHttpClient({ server: url, time: testTime() });
    try {
      const asked = [
        () => kube.serves('danm.k8s.io', 'v1', 'danmeps'),
        () => kube.listAll({ group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true }),
      ];
      for (const ask of asked) {
        const err = await ask().then(
          () => undefined,
          (e: Error) => e,
        );
        assert.instance(err, ConfigError, `${type}: ${String(err)}`);
        assert.match(String(err?.message), /not a Kubernetes API server/);
        assert.match(String(err?.message), new RegExp(url.replace(/\./g, '\\.')));
      }
    } finally {
      await kube.close();
      server.close();
    }
  }
});

// In a pod, with no kubeconfig anywhere: the ServiceAccount, as client-go reads it.
const account = (token: string) => {
  const sa = mkdtempSync(join(tmpdir(), 'twopass-sa-'));
  writeFileSync(join(sa, 'token'), token);
  writeFileSync(
    join(sa, 'ca.crt'),
    '-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n',
  );
  return sa;
};
const podEnv = (host: string, port?: string) => ({
  HOME: mkdtempSync(join(tmpdir(), 'twopass-home-')),
  KUBERNETES_SERVICE_HOST: host,
  ...(port ? { KUBERNETES_SERVICE_PORT: port } : {}),
});

test('in a pod without a kubeconfig: https to the Service address, the mounted CA, the token read now and trimmed', async () => {
  const sa = account('abc.def\n');
  const o = await kubeOptionsFromConfig(undefined, undefined, {
    env: podEnv('10.96.0.1', '443'),
    serviceAccountDir: sa,
  });
  assert.is(o.server, 'https://10.96.0.1:443');
  assert.equal(o.headers, { Authorization: 'Bearer abc.def' });
  assert.match(String(o.tls?.ca), /BEGIN CERTIFICATE/);
  // the kubelet rotates a projected token: the next run sends the new one
  writeFileSync(join(sa, 'token'), 'rotated');
  const again = await kubeOptionsFromConfig(undefined, undefined, {
    env: podEnv('10.96.0.1', '443'),
    serviceAccountDir: sa,
  });
  assert.equal(again.headers, { Authorization: 'Bearer rotated' });
  // an IPv6 Service address is bracketed
  const v6 = await kubeOptionsFromConfig(undefined, undefined, {
    env: podEnv('fd00::1', '443'),
    serviceAccountDir: sa,
  });
  assert.is(v6.server, 'https://[fd00::1]:443');
});

test('in a pod: no port, an empty token or no CA is said, never a run without credentials', async () => {
  const sa = account('t');
  const fails = (env: Record<string, string>, dir = sa) =>
    kubeOptionsFromConfig(undefined, undefined, { env, serviceAccountDir: dir }).then(
      () => {
        assert.unreachable('accepted');
        return '';
      },
      (err: Error) => err.message,
    );
  assert.match(await fails(podEnv('10.96.0.1')), /KUBERNETES_SERVICE_PORT is not/);
  assert.match(await fails(podEnv('10.96.0.1', '443'), account('  \n')), /token is empty/);
  const noCa = account('t');
  rmSync(join(noCa, 'ca.crt'));
  assert.match(await fails(podEnv('10.96.0.1', '443'), noCa), /ca\.crt: /);
  const noToken = account('t');
  rmSync(join(noToken, 'token'));
  assert.match(await fails(podEnv('10.96.0.1', '443'), noToken), /no kubeconfig found.*token not found/);
});

test('a kubeconfig in $HOME wins over the pod account (as kubectl)', async () => {
  const env = podEnv('10.96.0.1', '443');
  mkdirSync(join(env.HOME, '.kube'));
  writeFileSync(
    join(env.HOME, '.kube', 'config'),
    readFileSync(kubeconfig('home.yaml', '{ token: "from-home" }')),
  );
  const o = await kubeOptionsFromConfig(undefined, undefined, {
    env,
    serviceAccountDir: account('from-pod'),
  });
  assert.is(o.server, 'https://127.0.0.1:6443');
  assert.equal(o.headers, { Authorization: 'Bearer from-home' });
});

test('the in-cluster path does not load the client library (it costs about a second of every start)', () => {
  const sa = account('t');
  const script = `
    import { registerHooks } from 'node:module';
    const loaded = [];
    registerHooks({ resolve(s, c, next) { const r = next(s, c); if (r.url.includes('@kubernetes/client-node')) loaded.push(r.url); return r; } });
    const { kubeOptionsFromConfig } = await import(${JSON.stringify(new URL('../../shared/kube/kubeconfig.ts', import.meta.url).href)});
    const env = ${JSON.stringify(podEnv('10.96.0.1', '443'))};
    const o = await kubeOptionsFromConfig(undefined, undefined, { env, serviceAccountDir: ${JSON.stringify(sa)} });
    const before = loaded.length;
    await kubeOptionsFromConfig(${JSON.stringify(kubeconfig('lib.yaml', '{ token: "t" }'))});
    console.log(JSON.stringify({ server: o.server, before, after: loaded.length }));
  `;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.is(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    server: string;
    before: number;
    after: number;
  };
  assert.is(out.server, 'https://10.96.0.1:443');
  assert.is(out.before, 0, 'the client library was loaded for the in-cluster path');
  // and the hook sees it when a kubeconfig file is read (the test can fail)
  assert.ok(out.after > 0);
});

test.run();
