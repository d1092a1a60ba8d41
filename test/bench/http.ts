/**
 * Benchmark 4: HTTP clients paging 20k pods on the fake: @kubernetes/client-node's
 * generated CoreV1Api as configured by default, and twopass's KubeHttpClient (one
 * shared keep-alive undici Agent). Connections are counted by the server.
 */
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES, PODS } from '../../shared/kube/resources.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { testTime } from '../helpers/time.ts';
import { mdTable, ms } from './common.ts';

export async function httpBench(n = 20_000, pageSize = 500): Promise<string> {
  const fake = new FakeKubeServer({ continueTtlMs: 3_600_000 });
  await fake.start();
  fake.store.seed(NAMESPACES, [{ metadata: { name: 'bench' } }]);
  fake.store.seed(
    PODS,
    Array.from({ length: n }, (_, i) => ({
      metadata: { name: `p-${i}`, namespace: 'bench' },
      spec: { containers: [{ name: 'c', image: 'x' }] },
    })),
  );
  const rows: (string | number)[][] = [];
  const measure = async (name: string, f: () => Promise<number>) => {
    const c0 = fake.connections;
    const r0 = fake.requests.length;
    const t = performance.now();
    const items = await f();
    const el = performance.now() - t;
    const pages = fake.requests.length - r0;
    rows.push([name, items, pages, fake.connections - c0, ms(el), ms(el / pages)]);
  };
  const kc = new KubeConfig();
  kc.loadFromString(fake.kubeconfig());
  const core = kc.makeApiClient(CoreV1Api);
  await measure('client-node CoreV1Api (default)', async () => {
    let cont: string | undefined;
    let count = 0;
    do {
      const page = await core.listPodForAllNamespaces({
        limit: pageSize,
        ...(cont ? { _continue: cont } : {}),
      });
      count += page.items.length;
      cont = page.metadata?._continue || undefined;
    } while (cont);
    return count;
  });
  const kube = new KubeHttpClient({ server: fake.url, pageSize, time: testTime() });
  await measure(
    'twopass KubeHttpClient (shared keep-alive Agent)',
    async () => (await kube.listAll(PODS, {})).items.length,
  );
  await measure(
    'twopass KubeHttpClient, metadata only',
    async () => (await kube.listAll(PODS, { metadataOnly: true })).items.length,
  );
  await kube.close();
  await fake.stop();
  return mdTable(
    `HTTP: paging ${n.toLocaleString('en')} pods (page size ${pageSize}) on the fake`,
    ['client', 'items', 'requests', 'TCP connections', 'time', 'per page'],
    rows,
    'twopass uses its own client on one keep-alive Agent per run; client-node supplies the kubeconfig handling.',
  );
}

if (import.meta.main) console.log(await httpBench());
