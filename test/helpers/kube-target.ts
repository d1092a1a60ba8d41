/** Where a function test runs: the real test cluster, or the fake API server. */
import { randomUUID } from 'node:crypto';
import { type KubeClientOptions, KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES } from '../../shared/kube/resources.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { ADMIN_TOKEN, realCluster } from '../cluster/cluster.ts';
import { testTime } from './time.ts';

export type KubeTarget = Readonly<{
  name: 'real' | 'fake';
  options: Omit<KubeClientOptions, 'time'>;
  client: () => KubeHttpClient;
  fake?: FakeKubeServer;
  /** A fresh namespace for one test. */
  namespace: () => Promise<string>;
  close: () => Promise<void>;
  kubeconfig: (token?: string) => string;
}>;

async function withNamespaces(
  name: 'real' | 'fake',
  options: Omit<KubeClientOptions, 'time'>,
  kubeconfig: (t?: string) => string,
  close: () => Promise<void>,
  fake?: FakeKubeServer,
): Promise<KubeTarget> {
  const client = () => new KubeHttpClient({ ...options, time: testTime() });
  const admin = client();
  return {
    name,
    options,
    client,
    ...(fake ? { fake } : {}),
    kubeconfig,
    namespace: async () => {
      const ns = `t-${randomUUID().slice(0, 8)}`;
      await admin.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
      return ns;
    },
    close: async () => {
      await admin.close();
      await close();
    },
  };
}

export async function realTarget(): Promise<KubeTarget | undefined> {
  const c = await realCluster();
  if (!c) return undefined;
  return withNamespaces(
    'real',
    {
      server: c.server,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      tls: { rejectUnauthorized: false },
    },
    c.kubeconfig,
    async () => {},
  );
}

export async function fakeTarget(now?: () => Date): Promise<KubeTarget> {
  const fake = new FakeKubeServer(now ? { now } : {});
  await fake.start();
  const admin = new KubeHttpClient({ server: fake.url, time: testTime() });
  await installCrdsFromDir(admin);
  await admin.close();
  return withNamespaces(
    'fake',
    { server: fake.url },
    (t) => fake.kubeconfig(t),
    () => fake.stop(),
    fake,
  );
}
