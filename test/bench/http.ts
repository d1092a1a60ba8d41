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
    // about 1 KiB each, as pods with a few labels, a network-status annotation and a status are
    Array.from({ length: n }, (_, i) => ({
      metadata: {
        name: `p-${i}`,
        namespace: 'bench',
        labels: { app: 'web', 'pod-template-hash': '5d8c7b9f4', tier: 'frontend' },
        annotations: {
          'k8s.v1.cni.cncf.io/network-status': JSON.stringify([
            { name: 'default/net1', interface: 'net1', ips: [`10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`] },
          ]),
        },
      },
      spec: {
        nodeName: `node-${i % 50}`,
        containers: [{ name: 'web', image: 'registry.example/web:1.2.3' }],
      },
      status: {
        phase: 'Running',
        podIP: `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`,
        conditions: ['Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map((type) => ({
          type,
          status: 'True',
          lastTransitionTime: '2026-12-01T00:00:00Z',
        })),
      },
    })),
  );
  const rows: (string | number)[][] = [];
  const measure = async (name: string, f: () => Promise<number>) => {
    const c0 = fake.connections;
    const r0 = fake.requests.length;
    const t = performance.now();
    const items = await f();
    const el = performance.now() - t;
    const reqs = fake.requests.slice(r0);
    const pages = reqs.length;
    const mib = reqs.reduce((sum, q) => sum + q.bytes, 0) / 2 ** 20;
    rows.push([name, items, pages, fake.connections - c0, `${mib.toFixed(1)} MiB`, ms(el), ms(el / pages)]);
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
  for (const gzip of [true, false]) {
    const kube = new KubeHttpClient({ server: fake.url, pageSize, time: testTime(), gzip });
    const how = gzip ? 'gzip (the default)' : 'no gzip';
    await measure(
      `twopass KubeHttpClient (shared keep-alive Agent), ${how}`,
      async () => (await kube.listAll(PODS, {})).items.length,
    );
    await measure(
      `twopass KubeHttpClient, metadata only, ${how}`,
      async () => (await kube.listAll(PODS, { metadataOnly: true })).items.length,
    );
    await kube.close();
  }
  await fake.stop();
  return mdTable(
    `HTTP: paging ${n.toLocaleString('en')} pods (page size ${pageSize}) on the fake`,
    ['client', 'items', 'requests', 'TCP connections', 'received', 'time', 'per page'],
    rows,
    'twopass uses its own client on one keep-alive Agent per run; client-node supplies the kubeconfig handling. The fake gzips answers over 128 KiB when asked, as the API server does; "received" is bytes on the wire. On loopback gzip costs CPU and saves nothing; across a network the bytes are what a cluster pays.',
  );
}

if (import.meta.main) console.log(await httpBench());
