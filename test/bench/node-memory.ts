/**
 * Memory under the real limit: the danm-endpoints CronJob's pod, from the image, on the
 * real node (test/node), against fake API servers of growing size; at the manifest's 512Mi
 * and, where that is not enough, at larger limits. The peak is the container's cgroup
 * `memory.max_usage_in_bytes` (page cache included, as the kernel counts it against the limit).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { adminClient, startCluster } from '../cluster/cluster.ts';
import { memoryRun } from '../node/memory.ts';
import { IMAGE_ARCHIVE, nodeAvailable, startNode } from '../node/node.ts';
import { mdTable } from './common.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

export function cronJobTemplate(fn = 'danm-endpoints'): { spec: Record<string, unknown> } {
  const cj = parseAllDocuments(
    readFileSync(join(ROOT, `infra/kustomize/components/${fn}/cronjob.yaml`), 'utf8'),
  )
    .map((d) => d.toJS())
    .find((d) => d.kind === 'CronJob');
  return cj.spec.jobTemplate.spec.template;
}

export async function nodeMemoryBench(sizes: number[]): Promise<string> {
  const why = nodeAvailable();
  if (why) return `### Memory under the real limit\n\nskipped: ${why}\n`;
  const cluster = await startCluster({ serviceAccounts: true });
  const node = await startNode(cluster, [IMAGE_ARCHIVE]).catch(async (e) => {
    await cluster.stop();
    throw e;
  });
  const kube = adminClient(cluster);
  const rows: (string | number)[][] = [];
  try {
    for (const n of sizes) {
      // a raised limit comes with its heap cap raised to about 60% of it, as docs/operations.md says
      for (const [limit, heapMiB] of [['512Mi'], ['768Mi', 460], ['1Gi', 620]] as const) {
        const r = await memoryRun(kube, node, cronJobTemplate(), n, {
          limit,
          ...(heapMiB ? { heapMiB } : {}),
        });
        rows.push([
          n.toLocaleString('en'),
          `${limit} (heap cap ${heapMiB ? `${heapMiB} MiB` : '320 MiB, the image’s'})`,
          r.phase === 'Succeeded' ? `Succeeded` : `${r.phase}: ${r.reason ?? ''} (exit ${r.exitCode})`,
          `${r.peakMiB} MiB`,
          `${r.seconds} s`,
        ]);
        if (r.phase === 'Succeeded') break; // the smallest limit that holds it
      }
    }
  } finally {
    await kube.close();
    await node.stop();
    await cluster.stop();
  }
  return mdTable(
    'Memory under the real limit: the danm-endpoints CronJob pod on a real node',
    ['pods and DanmEps', 'memory limit', 'outcome', 'peak (cgroup max_usage)', 'pod time'],
    rows,
    "The image (infra/Dockerfile, its NODE_OPTIONS heap cap), the shipped CronJob's pod template, run by a real kubelet (containerd, runc, cgroup v1) against the fake API server seeded with N pods and N DanmEps (1% orphaned), a dry run with --record, state in the pod's /tmp. Larger limits are tried only when a smaller one is not enough.",
  );
}
