/**
 * A real node runs the image: a kubelet with Debian's containerd and runc registers a Ready
 * node with its own test apiserver, and the shipped CronJob's pod (its securityContext,
 * its 512Mi limit, its read-only root with /tmp) runs the image built from infra/Dockerfile
 * to Completed. SKIPPED (and
 * said so) without root, the packages or the binaries (test/node/build.sh); TWOPASS_REQUIRE_NODE=1
 * (CI) makes that a failure.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { parseAllDocuments } from 'yaml';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { CONFIGMAPS, type KubeObject, PODS, type ResourceRef } from '../../shared/kube/resources.ts';
import { adminClient, type Cluster, startCluster } from '../cluster/cluster.ts';
import { eventually } from '../helpers/time.ts';
import { IMAGE_ARCHIVE, NODE_NAME, type Node, nodeAvailable, podLog, startNode } from './node.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const NODES: ResourceRef = { group: '', version: 'v1', plural: 'nodes', kind: 'Node', namespaced: false };
const why = nodeAvailable();
if (why && process.env.TWOPASS_REQUIRE_NODE === '1')
  throw new Error(`the node suite is required (TWOPASS_REQUIRE_NODE=1) but ${why}`);
if (why) console.log(`  !!! the node suite is SKIPPED: ${why} !!!`);

type Ctx = { cluster: Cluster; node: Node; kube: KubeHttpClient };
const test = suite<Ctx>('a real node (kubelet, containerd, runc) runs the image');
const it = why ? test.skip : test;

/** The shipped danm-endpoints CronJob, as kustomize's component holds it. */
function shippedCronJob(): KubeObject & { spec: { jobTemplate: { spec: Record<string, unknown> } } } {
  const docs = parseAllDocuments(
    readFileSync(join(ROOT, 'infra/kustomize/components/danm-endpoints/cronjob.yaml'), 'utf8'),
  ).map((d) => d.toJS());
  return docs.find((d) => d.kind === 'CronJob');
}

/** The CronJob's pod template with the test's image and `args`, run in `namespace`. */
function podTemplate(args: string[]) {
  const tpl = structuredClone(
    (shippedCronJob().spec.jobTemplate.spec as { template: { spec: Record<string, unknown> } }).template,
  ) as { metadata?: Record<string, unknown>; spec: Record<string, unknown> };
  const c = (tpl.spec.containers as Record<string, unknown>[])[0]!;
  c.image = 'localhost/twopass:test';
  c.imagePullPolicy = 'Never';
  c.args = args;
  // This apiserver runs without the ServiceAccount admission plugin: no token to mount.
  delete tpl.spec.serviceAccountName;
  tpl.spec.automountServiceAccountToken = false;
  return tpl;
}

test.before(async (ctx) => {
  if (why) return;
  const built = spawnSync('bash', [join(ROOT, 'test/node/image.sh')], {
    encoding: 'utf8',
    timeout: 1_200_000,
  });
  if (built.status !== 0) throw new Error(`test/node/image.sh: ${built.stdout}${built.stderr}`);
  ctx.cluster = await startCluster();
  ctx.node = await startNode(ctx.cluster, [IMAGE_ARCHIVE]);
  ctx.kube = adminClient(ctx.cluster);
  await eventually(
    'the node is Ready',
    async () => {
      const n = await ctx.kube.get(NODES, undefined, NODE_NAME);
      const ready = (
        n?.status as { conditions?: { type: string; status: string }[] } | undefined
      )?.conditions?.find((c) => c.type === 'Ready');
      return ready?.status === 'True' ? true : undefined;
    },
    90_000,
  );
  // The CronJob mounts the config ConfigMap of the base install.
  await ctx.kube.create(CONFIGMAPS, {
    metadata: { name: 'twopass-config', namespace: 'default' },
    data: { 'config.yaml': readFileSync(join(ROOT, 'infra/kustomize/base/config.yaml'), 'utf8') },
  });
});
test.after(async (ctx) => {
  await ctx.kube?.close();
  await ctx.node?.stop();
  await ctx.cluster?.stop();
});

const phaseOf = async (kube: KubeHttpClient, name: string) =>
  ((await kube.get(PODS, 'default', name))?.status as { phase?: string } | undefined)?.phase;

it("the shipped CronJob's pod (65532, read-only root, /tmp, 512Mi) runs `twopass demo` from the image to Completed", async ({
  kube,
  node,
}) => {
  const tpl = podTemplate(['demo']);
  await kube.create(PODS, {
    metadata: { name: 'demo', namespace: 'default' },
    spec: { ...tpl.spec, nodeName: NODE_NAME, restartPolicy: 'Never' },
  });
  const phase = await eventually(
    'the pod ends',
    async () => {
      const p = await phaseOf(kube, 'demo');
      return p === 'Succeeded' || p === 'Failed' ? p : undefined;
    },
    180_000,
  );
  const log = podLog(node, 'default', 'demo', 'twopass');
  assert.is(phase, 'Succeeded', log.slice(-1500));
  assert.match(log, /sandbox: OK/);
  const pod = await kube.get(PODS, 'default', 'demo');
  const c = (
    pod!.spec as {
      containers: {
        securityContext: Record<string, unknown>;
        resources: { limits: Record<string, string> };
      }[];
    }
  ).containers[0]!;
  assert.is(c.securityContext.readOnlyRootFilesystem, true);
  assert.is(c.resources.limits.memory, '512Mi');
});

test.run();
