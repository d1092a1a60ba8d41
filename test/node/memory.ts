/**
 * One danm-endpoints run at scale in the shipped CronJob's pod (the image's NODE_OPTIONS
 * heap cap, the manifest's 512Mi limit unless told otherwise), on the real node, against a
 * fake API server seeded in bulk (test/bench/worlds.ts: N pods, N DanmEps, 1% orphaned).
 * The fake listens on 127.0.0.1; the pod reaches it on the bridge's address (a DNAT rule,
 * node.expose). The peak is the container's cgroup `memory.max_usage_in_bytes` (cgroup v1),
 * read while it runs; an OOM kill shows as the container's reason.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { KubeHttpClient as Client } from '../../shared/kube/client.ts';
import { CONFIGMAPS, type KubeObject, NAMESPACES, PODS } from '../../shared/kube/resources.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { danmWorld, NS as WORLD_NS } from '../bench/worlds.ts';
import { testTime } from '../helpers/time.ts';
import { BRIDGE_IP, type Node, podLog } from './node.ts';

export type MemoryRun = {
  objects: number;
  limit: string;
  phase: string;
  exitCode: number | undefined;
  /** `OOMKilled` when the limit was too small. */
  reason: string | undefined;
  /** The heap cap, when raised from the image's. */
  heapMiB: number | undefined;
  peakMiB: number;
  seconds: number;
  log: string;
};

const CGROUP = '/sys/fs/cgroup/memory/kubepods';

function maxUsage(podUid: string, containerId: string | undefined): number | undefined {
  for (const qos of ['burstable', 'guaranteed', 'besteffort', '']) {
    const pod = join(CGROUP, qos, `pod${podUid}`);
    const file = containerId
      ? join(pod, containerId, 'memory.max_usage_in_bytes')
      : join(pod, 'memory.max_usage_in_bytes');
    if (existsSync(file)) return Number(readFileSync(file, 'utf8'));
  }
  return undefined;
}

/**
 * Runs the CronJob's pod template (`template`, from the shipped manifest) as one pod in
 * namespace `ns` of the node's cluster, against a fake seeded with `objects` pods and DanmEps.
 */
export async function memoryRun(
  kube: KubeHttpClient,
  node: Node,
  template: { spec: Record<string, unknown> },
  objects: number,
  /** `heapMiB`: NODE_OPTIONS' heap cap for a raised limit (the image's own cap otherwise). */
  opts: { ns?: string; limit?: string; heapMiB?: number } = {},
): Promise<MemoryRun> {
  const ns = opts.ns ?? 'twopass-memory';
  const limit = opts.limit ?? '512Mi';
  const fake = new FakeKubeServer({ continueTtlMs: 3_600_000 });
  await fake.start();
  try {
    const admin = new Client({ server: fake.url, time: testTime() });
    await installCrdsFromDir(admin);
    await admin.close();
    fake.store.seed(NAMESPACES, [{ metadata: { name: WORLD_NS } }]);
    danmWorld(fake, objects);
    const port = Number(new URL(fake.url).port);
    node.expose(port);

    if (!(await kube.get(NAMESPACES, undefined, ns)))
      await kube.create(NAMESPACES, { metadata: { name: ns } });
    const name = `run-${objects}-${limit.toLowerCase()}`;
    const config = {
      apply: false,
      record: true,
      state: 'file:/tmp/state',
      deadline: '10m',
      pageSize: 500,
      functions: {
        'danm-endpoints': { maxEvidenceDropPercent: 100 },
        'whereabouts-ips': { enabled: false },
      },
    };
    const kubeconfig = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'fake',
          cluster: { server: `http://${BRIDGE_IP}:${port}`, 'insecure-skip-tls-verify': true },
        },
      ],
      users: [{ name: 'fake', user: {} }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake' } }],
      'current-context': 'fake',
    };
    await kube.create(CONFIGMAPS, {
      metadata: { name, namespace: ns },
      data: { 'config.yaml': stringify(config), kubeconfig: stringify(kubeconfig) },
    });
    const spec = structuredClone(template.spec) as Record<string, unknown> & {
      containers: Record<string, unknown>[];
      volumes: { name: string; configMap?: { name: string } }[];
    };
    delete spec.serviceAccountName;
    spec.automountServiceAccountToken = false;
    spec.restartPolicy = 'Never';
    for (const v of spec.volumes) if (v.configMap) v.configMap = { name };
    const c = spec.containers[0]!;
    // the image as imported (whatever name the test gave it besides)
    c.image = 'localhost/twopass:test';
    c.imagePullPolicy = 'Never';
    c.args = [
      'run',
      'danm-endpoints',
      '--config',
      '/etc/twopass/config.yaml',
      '--kubeconfig',
      '/etc/twopass/kubeconfig',
      '--output',
      'json',
    ];
    c.env = opts.heapMiB
      ? [{ name: 'NODE_OPTIONS', value: `--max-old-space-size=${opts.heapMiB} --max-semi-space-size=8` }]
      : [];
    c.resources = { requests: { cpu: '50m', memory: '128Mi' }, limits: { memory: limit } };
    const started = Date.now();
    const pod = await kube.create(PODS, { metadata: { name, namespace: ns }, spec });
    let peak = 0;
    let ended: KubeObject | undefined;
    const until = Date.now() + 900_000;
    while (!ended) {
      if (Date.now() > until) throw new Error(`pod ${ns}/${name} did not end within 15 min`);
      const p = await kube.get(PODS, ns, name).catch(() => undefined);
      const s = p?.status as
        | {
            phase?: string;
            containerStatuses?: {
              containerID?: string;
              state?: { waiting?: { reason?: string; message?: string } };
            }[];
          }
        | undefined;
      const waiting = s?.containerStatuses?.[0]?.state?.waiting;
      if (waiting?.reason && /Err|BackOff|Invalid/.test(waiting.reason))
        throw new Error(`pod ${ns}/${name} cannot start: ${waiting.reason} ${waiting.message ?? ''}`);
      const id = s?.containerStatuses?.[0]?.containerID?.replace(/^containerd:\/\//, '');
      peak = Math.max(peak, maxUsage(pod.metadata.uid!, id) ?? 0);
      if (s?.phase === 'Succeeded' || s?.phase === 'Failed') ended = p;
      else await new Promise((r) => setTimeout(r, 200));
    }
    const status = ended.status as {
      phase: string;
      containerStatuses?: {
        containerID?: string;
        state?: { terminated?: { exitCode: number; reason?: string } };
      }[];
    };
    const t = status.containerStatuses?.[0]?.state?.terminated;
    const id = status.containerStatuses?.[0]?.containerID?.replace(/^containerd:\/\//, '');
    peak = Math.max(peak, maxUsage(pod.metadata.uid!, id) ?? maxUsage(pod.metadata.uid!, undefined) ?? 0);
    const log = podLog(node, ns, name, 'twopass');
    return {
      objects,
      limit,
      phase: status.phase,
      exitCode: t?.exitCode,
      reason: /heap out of memory|Reached heap limit/.test(log) ? 'V8 heap limit' : t?.reason,
      heapMiB: opts.heapMiB,
      peakMiB: Math.round(peak / 2 ** 20),
      seconds: Math.round((Date.now() - started) / 100) / 10,
      log,
    };
  } finally {
    await fake.stop();
  }
}
