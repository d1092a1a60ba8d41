/**
 * startCluster(): a real etcd + kube-apiserver on free loopback ports, RBAC on,
 * a static token file (admin plus the identities the RBAC tests use), the
 * functions' CRDs installed. Both processes are stopped by PID at the end,
 * also when the test process fails.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { type KubeClientOptions, KubeHttpClient } from '../../shared/kube/client.ts';
import { tokenKubeconfig } from '../../shared/kube/kubeconfig.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { track } from '../helpers/children.ts';
import { testTime } from '../helpers/time.ts';

export const KUBE_VERSION = process.env.TWOPASS_KUBE_VERSION ?? 'v1.36.3';
export const ADMIN_TOKEN = 'twopass-admin-token';

/** Identities mapped to the ServiceAccounts the kustomize base creates. */
export const IDENTITIES: Record<string, { token: string; user: string; groups: string[] }> = {
  'danm-endpoints': {
    token: 'twopass-danm-endpoints-token',
    user: 'system:serviceaccount:twopass-system:twopass-danm-endpoints',
    groups: ['system:serviceaccounts', 'system:serviceaccounts:twopass-system', 'system:authenticated'],
  },
  'whereabouts-ips': {
    token: 'twopass-whereabouts-ips-token',
    user: 'system:serviceaccount:twopass-system:twopass-whereabouts-ips',
    groups: ['system:serviceaccounts', 'system:serviceaccounts:twopass-system', 'system:authenticated'],
  },
  'lbaas-ports': {
    token: 'twopass-lbaas-ports-token',
    user: 'system:serviceaccount:twopass-system:twopass-lbaas-ports',
    groups: ['system:serviceaccounts', 'system:serviceaccounts:twopass-system', 'system:authenticated'],
  },
  nobody: { token: 'twopass-nobody-token', user: 'nobody', groups: ['system:authenticated'] },
};

export type Cluster = Readonly<{
  server: string;
  /** etcd's client URL (the contract suite compacts it to expire continue tokens). */
  etcd: string;
  version: string;
  dir: string;
  kubeconfigPath: string;
  kubeconfig: (token?: string) => string;
  /** The server processes, when this process started them (benchmarks read /proc for their cost). */
  pids?: Readonly<{ apiserver: number; etcd: number }>;
  /** The audit log (JSON lines, one per request), when asked for: benchmarks count requests by user agent. */
  auditLog?: string;
  stop: () => Promise<void>;
}>;

export function binDir(): string {
  return join(process.env.TWOPASS_CACHE ?? join(homedir(), '.cache', 'twopass'), 'kube', KUBE_VERSION);
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

const kubeconfigFor = (server: string, token: string) => tokenKubeconfig(server, token, 'test');

async function waitFor(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
  died: () => string | undefined,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const dead = died();
    if (dead) throw new Error(`${what}: ${dead}`);
    if (await check().catch(() => false)) return;
    if (Date.now() > until) throw new Error(`${what}: not ready after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export type ClusterOptions = {
  crdDir?: string;
  audit?: boolean;
  /** The ServiceAccount admission plugin on (pods get their tokens): for a real node. */
  serviceAccounts?: boolean;
};

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  if (process.env.TWOPASS_PHASE === 'early')
    throw new Error(
      'the early phase (TWOPASS_PHASE=early) has no real servers: this test file needs one, so test/run-tests.ts must not count it as early (see REAL_MARKERS)',
    );
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cluster-'));
  const [etcdPort, peerPort, apiPort] = [await freePort(), await freePort(), await freePort()];
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  writeFileSync(join(dir, 'sa.key'), privateKey.export({ type: 'sec1', format: 'pem' }));
  const tokens = [`${ADMIN_TOKEN},admin,admin-uid,"system:masters"`];
  for (const [name, id] of Object.entries(IDENTITIES))
    tokens.push(`${id.token},${id.user},${name}-uid,"${id.groups.join(',')}"`);
  writeFileSync(join(dir, 'tokens.csv'), `${tokens.join('\n')}\n`);
  const log = (name: string) => openSync(join(dir, `${name}.log`), 'a');
  const exits: Record<string, string> = {};
  const launch = (name: string, args: string[]) => {
    const c = spawn(join(bin, name), args, { stdio: ['ignore', log(name), log(name)] });
    track(c);
    c.on('exit', (code, sig) => {
      exits[name] = `${name} exited (${code ?? sig}); see ${join(dir, `${name}.log`)}`;
    });
    return c;
  };
  const etcd = launch('etcd', [
    '--data-dir',
    join(dir, 'etcd'),
    '--listen-client-urls',
    `http://127.0.0.1:${etcdPort}`,
    '--advertise-client-urls',
    `http://127.0.0.1:${etcdPort}`,
    '--listen-peer-urls',
    `http://127.0.0.1:${peerPort}`,
    '--initial-advertise-peer-urls',
    `http://127.0.0.1:${peerPort}`,
    '--initial-cluster',
    `default=http://127.0.0.1:${peerPort}`,
    '--unsafe-no-fsync',
    '--log-level',
    'warn',
  ]);
  const died = () => Object.values(exits)[0];
  const stop = async () => {
    for (const c of [api, etcd]) {
      if (c?.pid && c.exitCode === null) {
        c.kill('SIGTERM');
        await new Promise<void>((r) => {
          const t = setTimeout(() => {
            c.kill('SIGKILL');
            r();
          }, 5000);
          c.once('exit', () => {
            clearTimeout(t);
            r();
          });
        });
      }
    }
    if (!process.env.TWOPASS_KEEP_CLUSTER_DIR) rmSync(dir, { recursive: true, force: true });
  };
  let api: ChildProcess | undefined;
  try {
    await waitFor('etcd', 30_000, async () => (await fetch(`http://127.0.0.1:${etcdPort}/health`)).ok, died);
    mkdirSync(join(dir, 'certs'));
    const auditLog = join(dir, 'audit.log');
    if (opts.audit)
      writeFileSync(
        join(dir, 'audit-policy.yaml'),
        'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n',
      );
    api = launch('kube-apiserver', [
      ...(opts.audit
        ? [
            `--audit-policy-file=${join(dir, 'audit-policy.yaml')}`,
            `--audit-log-path=${auditLog}`,
            '--audit-log-mode=blocking',
          ]
        : []),
      `--etcd-servers=http://127.0.0.1:${etcdPort}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--secure-port=${apiPort}`,
      `--cert-dir=${join(dir, 'certs')}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      `--service-account-issuer=https://127.0.0.1:${apiPort}`,
      `--service-account-key-file=${join(dir, 'sa.key')}`,
      `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
      `--token-auth-file=${join(dir, 'tokens.csv')}`,
      '--authorization-mode=RBAC',
      ...(opts.serviceAccounts ? [] : ['--disable-admission-plugins=ServiceAccount']),
      '--enable-priority-and-fairness=false',
      // Compact often, so that the contract suite sees continue tokens expire (410) within seconds.
      '--etcd-compaction-interval=10s',
      '--v=1',
    ]);
    const server = `https://127.0.0.1:${apiPort}`;
    const kubeconfigPath = join(dir, 'kubeconfig');
    writeFileSync(kubeconfigPath, kubeconfigFor(server, ADMIN_TOKEN));
    const admin = new KubeHttpClient({
      server,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      tls: { rejectUnauthorized: false },
      readAttempts: 1,
      callTimeoutMs: 5000,
      time: testTime(),
    });
    try {
      await waitFor(
        'kube-apiserver /readyz',
        120_000,
        async () => {
          const r = await fetchInsecure(`${server}/readyz`);
          return r === 200;
        },
        died,
      );
      const version = execFileSync(join(bin, 'kube-apiserver'), ['--version'], { encoding: 'utf8' }).trim();
      await installCrds(
        admin,
        opts.crdDir ?? new URL('../../shared/sandbox/crds/', import.meta.url).pathname,
      );
      return {
        server,
        etcd: `http://127.0.0.1:${etcdPort}`,
        ...(api?.pid && etcd.pid ? { pids: { apiserver: api.pid, etcd: etcd.pid } } : {}),
        ...(opts.audit ? { auditLog } : {}),
        version,
        dir,
        kubeconfigPath,
        kubeconfig: (token = ADMIN_TOKEN) => kubeconfigFor(server, token),
        stop,
      };
    } finally {
      await admin.close();
    }
  } catch (err) {
    await stop();
    throw err;
  }
}

async function fetchInsecure(url: string): Promise<number> {
  const { request, Agent } = await import('undici');
  const agent = new Agent({ connect: { rejectUnauthorized: false } });
  try {
    const r = await request(url, { dispatcher: agent, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    await r.body.text();
    return r.statusCode;
  } finally {
    await agent.close();
  }
}

/** Installs the CRD manifests (shared with the sandbox) and waits until the server serves them. */
export async function installCrds(kube: KubeHttpClient, dir: string): Promise<void> {
  const wanted: { group: string; version: string; plural: string }[] = [];
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.yaml'))) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, f), 'utf8'))) {
      const crd = doc.toJS() as {
        spec: { group: string; names: { plural: string }; versions: { name: string }[] };
      } | null;
      if (crd)
        wanted.push({
          group: crd.spec.group,
          version: crd.spec.versions[0]!.name,
          plural: crd.spec.names.plural,
        });
    }
  }
  await installCrdsFromDir(kube);
  const until = Date.now() + 60_000;
  for (const w of wanted) {
    for (;;) {
      // a fresh client each time: discovery answers are cached per client
      const fresh = new KubeHttpClient({
        server: kube.server,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        tls: { rejectUnauthorized: false },
        readAttempts: 1,
        time: testTime(),
      });
      const ok = await fresh.serves(w.group, w.version, w.plural).catch(() => false);
      await fresh.close();
      if (ok) break;
      if (Date.now() > until) throw new Error(`CRD ${w.plural}.${w.group} not served after 60 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/**
 * Stops the cluster `realCluster` started itself (one the runner gave is the runner's). A
 * script that ends on its own, like `npm run bench`, calls it: the servers' processes keep
 * the event loop alive, so its 'beforeExit' never comes.
 */
export async function stopRealCluster(): Promise<void> {
  const c = await shared?.catch(() => undefined);
  shared = undefined;
  await c?.stop();
}

/** The cluster the test runner started (TWOPASS_TEST_KUBECONFIG), or one of our own. */
let shared: Promise<Cluster | undefined> | undefined;
export function realCluster(): Promise<Cluster | undefined> {
  if (process.env.TWOPASS_PHASE === 'early')
    throw new Error(
      'the early phase (TWOPASS_PHASE=early) has no real servers: this test file needs one, so test/run-tests.ts must not count it as early (see REAL_MARKERS)',
    );
  shared ??= (async () => {
    if (process.env.TWOPASS_NO_REAL_CLUSTER === '1') {
      console.error(
        '\n!!! TWOPASS_NO_REAL_CLUSTER=1: tests against the real kube-apiserver are SKIPPED !!!\n',
      );
      return undefined;
    }
    const path = process.env.TWOPASS_TEST_KUBECONFIG;
    if (path) {
      const text = readFileSync(path, 'utf8');
      const server = /server: "([^"]+)"/.exec(text)?.[1];
      if (!server) throw new Error(`${path}: no server`);
      return {
        server,
        etcd: process.env.TWOPASS_TEST_ETCD ?? '',
        version: process.env.TWOPASS_TEST_KUBE_VERSION ?? KUBE_VERSION,
        dir: '',
        kubeconfigPath: path,
        kubeconfig: (token = ADMIN_TOKEN) => kubeconfigFor(server, token),
        stop: async () => {},
      };
    }
    const c = await startCluster();
    process.once('beforeExit', () => void c.stop());
    return c;
  })();
  return shared;
}

export function adminClient(
  c: Cluster,
  token = ADMIN_TOKEN,
  extra: Partial<Omit<KubeClientOptions, 'server'>> = {},
): KubeHttpClient {
  return new KubeHttpClient({
    server: c.server,
    headers: { authorization: `Bearer ${token}` },
    tls: { rejectUnauthorized: false },
    time: testTime(),
    ...extra,
  });
}
