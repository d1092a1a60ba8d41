/**
 * A real node runs what we ship: a kubelet with Debian's containerd and runc, the
 * controller manager (CronJob, Job, ServiceAccount, root CA, garbage collector) and the
 * scheduler, beside their own test apiserver with ServiceAccount tokens. The image is the
 * one infra/Dockerfile builds (test/node/image.sh), imported under the name the manifests
 * use. Each install (the kustomize overlays, the Helm chart) is applied with kubectl, and
 * its CronJobs' Jobs run in pods that reach the apiserver through the `kubernetes`
 * Service with their ServiceAccount's token and the shipped RBAC.
 *
 * SKIPPED (and said so) without root, the packages or the binaries (test/node/build.sh);
 * TWOPASS_REQUIRE_NODE=1 (CI) makes that a failure.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { parseAllDocuments } from 'yaml';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { CONFIGMAPS, type KubeObject, LEASES, NAMESPACES, NODES, PODS } from '../../shared/kube/resources.ts';
import {
  allocated,
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
  R,
} from '../../shared/sandbox/scenarios/danm.ts';
import { createService } from '../../shared/sandbox/scenarios/lbaas.ts';
import { adminClient, type Cluster, startCluster } from '../cluster/cluster.ts';
import { eventually } from '../helpers/time.ts';
import { realOpenStack } from '../openstack/real-openstack.ts';
import { realWorld } from '../openstack/real-world.ts';
import {
  apply,
  eventsOn,
  jobEnd,
  kubectl,
  NS,
  type Obj,
  poll,
  renderChart,
  renderOverlay,
  runJob,
  shortGrace,
  stopsAfter,
  summary,
  uninstall,
  withConfig,
} from './jobs.ts';
import { memoryRun } from './memory.ts';
import { IMAGE_ARCHIVE, NODE_NAME, type Node, nodeAvailable, podLog, startNode } from './node.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const why = nodeAvailable();
if (why && process.env.TWOPASS_REQUIRE_NODE === '1')
  throw new Error(`the node suite is required (TWOPASS_REQUIRE_NODE=1) but ${why}`);
if (why) console.log(`  !!! the node suite is SKIPPED: ${why} !!!`);

type Ctx = {
  cluster: Cluster;
  node: Node;
  kube: KubeHttpClient;
  /** What the running test installed: removed after it, passed or failed. */
  installed?: Obj[];
};
const test = suite<Ctx>('a real node (kubelet, containerd, runc, controllers) runs the CronJobs');
const it = why ? test.skip : test;

/** The shipped danm-endpoints CronJob, as kustomize's component holds it. */
function shippedCronJob(): KubeObject & { spec: { jobTemplate: { spec: Record<string, unknown> } } } {
  const docs = parseAllDocuments(
    readFileSync(join(ROOT, 'infra/kustomize/components/danm-endpoints/cronjob.yaml'), 'utf8'),
  ).map((d) => d.toJS());
  return docs.find((d) => d.kind === 'CronJob');
}

test.before(async (ctx) => {
  if (why) return;
  const built = spawnSync('bash', [join(ROOT, 'test/node/image.sh')], {
    encoding: 'utf8',
    timeout: 1_200_000,
  });
  if (built.status !== 0) throw new Error(`test/node/image.sh: ${built.stdout}${built.stderr}`);
  ctx.cluster = await startCluster({ serviceAccounts: true });
  ctx.node = await startNode(ctx.cluster, [IMAGE_ARCHIVE]);
  // the name the manifests and the chart use (imagePullPolicy IfNotPresent: never pulled)
  ctx.node.ctr('images', 'tag', 'localhost/twopass:test', 'docker.io/library/twopass:0.1.0');
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
});
stopsAfter(test);

it("the shipped CronJob's pod (65532, read-only root, /tmp, 512Mi) runs `twopass demo` from the image to Completed", async ({
  kube,
  node,
}) => {
  const tpl = structuredClone(
    (shippedCronJob().spec.jobTemplate.spec as { template: { spec: Record<string, unknown> } }).template,
  );
  const c = (tpl.spec.containers as Record<string, unknown>[])[0]!;
  c.args = ['demo'];
  delete tpl.spec.serviceAccountName; // the default namespace's own
  await kube.create(CONFIGMAPS, {
    metadata: { name: 'twopass-config', namespace: 'default' },
    data: { 'config.yaml': readFileSync(join(ROOT, 'infra/kustomize/base/config.yaml'), 'utf8') },
  });
  await kube.create(PODS, {
    metadata: { name: 'demo', namespace: 'default' },
    spec: { ...tpl.spec, restartPolicy: 'Never' },
  });
  const phase = await eventually(
    'the pod ends',
    async () => {
      const p = ((await kube.get(PODS, 'default', 'demo'))?.status as { phase?: string } | undefined)?.phase;
      return p === 'Succeeded' || p === 'Failed' ? p : undefined;
    },
    180_000,
  );
  const log = podLog(node, 'default', 'demo', 'twopass');
  assert.is(phase, 'Succeeded', log.slice(-1500));
  assert.match(log, /sandbox: OK/);
  const pod = await kube.get(PODS, 'default', 'demo');
  const spec = pod!.spec as {
    nodeName: string;
    containers: { securityContext: Record<string, unknown>; resources: { limits: Record<string, string> } }[];
  };
  assert.is(spec.nodeName, NODE_NAME, 'placed by the scheduler');
  assert.is(spec.containers[0]!.securityContext.readOnlyRootFilesystem, true);
  assert.is(spec.containers[0]!.resources.limits.memory, '512Mi');
});

/** A namespace of workloads: a DanmNet with a leaked DanmEp (its pod gone) and a live one. */
async function danmWorld(kube: KubeHttpClient, ns: string) {
  await kube.create(NAMESPACES, { metadata: { name: ns } });
  await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.9', '10.10.10.10']);
  const leak = await createEndpoint(kube, await createPod(kube, ns, 'gone-0'), 'test-net1', '10.10.10.9/24');
  await forceDeletePod(kube, ns, 'gone-0');
  // a pod that runs on the node (the pause image) and holds the other address
  const pod = await kube.create(PODS, {
    metadata: {
      name: 'live-0',
      namespace: ns,
      annotations: { 'danm.k8s.io/interfaces': JSON.stringify([{ network: 'test-net1', ip: 'dynamic' }]) },
    },
    spec: { containers: [{ name: 'app', image: 'localhost/pause:test', imagePullPolicy: 'Never' }] },
  });
  const live = await createEndpoint(kube, pod, 'test-net1', '10.10.10.10/24');
  return { leak, live };
}

const has = (j: { events: Record<string, unknown>[] }, event: string, key?: string) =>
  j.events.some((e) => e.event === event && (key === undefined || e.key === key));

it('the danm-endpoints overlay: a Job from its CronJob runs as its ServiceAccount, records state and a Lease, and the next one deletes the leak', async (ctx) => {
  const { cluster, node, kube } = ctx;
  const objs = withConfig(renderOverlay('danm-endpoints'), shortGrace('danm-endpoints'));
  ctx.installed = objs;
  apply(cluster, objs);
  const { leak, live } = await danmWorld(kube, 'apps');

  const first = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(first.condition, 'Complete', summary(first));
  assert.is(first.exitCode, 0);
  assert.ok(has(first, 'candidate.new', leak.metadata.uid), summary(first));
  assert.ok(await kube.get(CONFIGMAPS, NS, 'twopass-danm-endpoints'), 'the state ConfigMap is written');
  assert.ok(await kube.get(LEASES, NS, 'twopass-danm-endpoints'), 'the Lease is written');
  await new Promise((r) => setTimeout(r, 2500)); // the grace

  const second = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(second.condition, 'Complete', summary(second));
  assert.ok(has(second, 'resource.deleted', leak.metadata.uid), summary(second));
  assert.is(await kube.get(R.danmeps, 'apps', leak.metadata.name), undefined, 'the leak is deleted');
  assert.ok(await kube.get(R.danmeps, 'apps', live.metadata.name), 'the live endpoint stays');
  const net = await kube.get(R.DanmNet, 'apps', 'test-net1');
  assert.not.ok(allocated(net!).includes('10.10.10.9'), "the leak's address is freed");
  assert.ok(allocated(net!).includes('10.10.10.10'), "the live one's is kept");
});

it('a refused run (the blast-radius guard, exit 4) fails its Job once, not retried, with a Warning Event on the Job; nothing deleted', async (ctx) => {
  const { cluster, node, kube } = ctx;
  const objs = withConfig(renderOverlay('danm-endpoints'), shortGrace('danm-endpoints', { maxDeletions: 0 }));
  ctx.installed = objs;
  apply(cluster, objs);
  const { leak } = await danmWorld(kube, 'apps-refused');
  assert.is((await runJob(cluster, node, 'twopass-danm-endpoints')).exitCode, 0);
  await new Promise((r) => setTimeout(r, 2500));

  const refused = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(refused.condition, 'Failed', summary(refused));
  assert.is(refused.exitCode, 4, summary(refused));
  assert.is(refused.pods.length, 1, 'backoffLimit 0: one pod, no retry');
  assert.is(refused.job.status?.failed, 1);
  const warning = eventsOn(cluster, NS, 'Job', refused.job.metadata.name).find(
    (e) => e.reason === 'TwopassRunRefused',
  );
  assert.ok(warning, 'the Warning Event is on the Job');
  assert.is(warning.type, 'Warning');
  assert.is(warning.involvedObject.uid, refused.job.metadata.uid, 'with the Job’s UID: describe lists it');
  assert.match(warning.message, /refused \(exit 4\)/);
  assert.ok(await kube.get(R.danmeps, 'apps-refused', leak.metadata.name), 'nothing deleted');
});

it('the Lease held by another run: the Job exits 5 (locked) with its Warning Event; a missing RBAC verb exits 3, in one line, not a stack trace', async (ctx) => {
  const { cluster, node, kube } = ctx;
  const objs = withConfig(renderOverlay('danm-endpoints'), shortGrace('danm-endpoints'));
  ctx.installed = objs;
  apply(cluster, objs);
  await kube.create(LEASES, {
    metadata: { name: 'twopass-danm-endpoints', namespace: NS },
    spec: {
      holderIdentity: 'another-run',
      leaseDurationSeconds: 900,
      acquireTime: new Date().toISOString().replace('Z', '000Z'),
      renewTime: new Date().toISOString().replace('Z', '000Z'),
    },
  });
  const locked = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(locked.exitCode, 5, summary(locked));
  assert.is(locked.condition, 'Failed');
  assert.ok(
    eventsOn(cluster, NS, 'Job', locked.job.metadata.name).some((e) => e.reason === 'TwopassRunLocked'),
    'TwopassRunLocked on the Job',
  );
  kubectl(cluster, ['delete', 'lease', 'twopass-danm-endpoints', '-n', NS]);

  // the ClusterRole without `list` on pods: the snapshot cannot be complete
  const role = objs.find((o) => o.kind === 'ClusterRole')!;
  const lacking = structuredClone(role);
  for (const r of lacking.rules ?? [])
    if (r.resources.includes('pods')) r.verbs = r.verbs.filter((v) => v !== 'list');
  apply(cluster, [lacking]);
  const denied = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(denied.exitCode, 3, summary(denied));
  assert.is(denied.condition, 'Failed');
  assert.ok(has(denied, 'run.aborted'), summary(denied));
  assert.match(denied.log, /forbidden|403/i);
  assert.not.match(denied.log, /\n\s+at /, 'no stack trace');
  assert.ok(
    eventsOn(cluster, NS, 'Job', denied.job.metadata.name).some((e) => e.reason === 'TwopassRunAborted'),
    'TwopassRunAborted on the Job',
  );
});

it('the dry-run overlay: both CronJobs complete, the second danm-endpoints Job confirms with dryRun, and nothing is deleted', async (ctx) => {
  const { cluster, node, kube } = ctx;
  const objs = withConfig(renderOverlay('dry-run'), (c) => {
    shortGrace('danm-endpoints')(c);
    shortGrace('whereabouts-ips')(c);
  });
  ctx.installed = objs;
  apply(cluster, objs);
  const { leak } = await danmWorld(kube, 'apps-dry');
  const first = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(first.condition, 'Complete', summary(first));
  await new Promise((r) => setTimeout(r, 2500));
  const second = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(second.condition, 'Complete', summary(second));
  const confirmed = second.events.find(
    (e) => e.event === 'candidate.confirmed' && e.key === leak.metadata.uid,
  );
  assert.ok(confirmed, summary(second));
  assert.is(second.events.find((e) => e.event === 'run.finished')?.dryRun, true);
  assert.not.ok(has(second, 'resource.deleted'));
  assert.ok(await kube.get(R.danmeps, 'apps-dry', leak.metadata.name), 'a dry run deletes nothing');
  const wh = await runJob(cluster, node, 'twopass-whereabouts-ips');
  assert.is(wh.condition, 'Complete', summary(wh));
  assert.ok(await kube.get(CONFIGMAPS, NS, 'twopass-whereabouts-ips'), 'whereabouts-ips recorded its state');
});

it('the Helm chart, installed: danm-endpoints deleting deletes the leak through its ServiceAccount; Forbid skips a schedule while a Job is active', async (ctx) => {
  const { cluster, node, kube } = ctx;
  kubectl(cluster, ['create', 'namespace', NS]);
  ctx.installed = [];
  const objs = withConfig(
    renderChart(['functions.danm-endpoints.apply=true', 'functions.whereabouts-ips.enabled=false']),
    shortGrace('danm-endpoints'),
  );
  ctx.installed = objs;
  apply(cluster, objs);
  const { leak } = await danmWorld(kube, 'apps-helm');
  const first = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.is(first.condition, 'Complete', summary(first));
  await new Promise((r) => setTimeout(r, 2500));
  const second = await runJob(cluster, node, 'twopass-danm-endpoints');
  assert.ok(has(second, 'resource.deleted', leak.metadata.uid), summary(second));
  assert.is(await kube.get(R.danmeps, 'apps-helm', leak.metadata.name), undefined);

  // Forbid: with the node cordoned, the first scheduled Job stays active (its pod Pending);
  // the next minute's schedule is skipped, and once the node is back the Job completes.
  // (Installs are applied with their CronJobs suspended; this one is resumed here.)
  const patch = (p: string) =>
    kubectl(cluster, ['patch', 'cronjob', 'twopass-danm-endpoints', '-n', NS, '-p', p]);
  const cronjob = () =>
    JSON.parse(kubectl(cluster, ['get', 'cronjob', 'twopass-danm-endpoints', '-n', NS, '-o', 'json'])) as {
      status?: { active?: { name: string }[] };
    };
  kubectl(cluster, ['cordon', NODE_NAME]);
  let scheduled: string | undefined;
  try {
    patch('{"spec":{"schedule":"* * * * *","suspend":false}}');
    const skipped = await poll(
      'a schedule skipped by Forbid',
      () =>
        eventsOn(cluster, NS, 'CronJob', 'twopass-danm-endpoints').find(
          (e) => e.reason === 'JobAlreadyActive',
        ),
      210_000,
    );
    assert.match(skipped.message, /concurrency policy is Forbid/);
    const active = cronjob().status?.active?.map((a) => a.name) ?? [];
    assert.is(active.length, 1, `one active Job: the skipped schedule started none (${active.join(', ')})`);
    scheduled = active[0];
  } finally {
    patch('{"spec":{"suspend":true}}');
    kubectl(cluster, ['uncordon', NODE_NAME]);
  }
  const end = await jobEnd(cluster, node, scheduled!);
  assert.is(end.condition, 'Complete', summary(end));
});

it('the other overlays run on the node: whereabouts-ips and the cilium rules complete their Jobs; the scheduler Deployment becomes Available (its /healthz probe answers from the pod network)', async (ctx) => {
  const { cluster, node } = ctx;
  for (const overlay of ['whereabouts-ips', 'cilium-rules']) {
    const objs = renderOverlay(overlay);
    ctx.installed = objs;
    apply(cluster, objs);
    const cronjobs = objs.filter((o) => o.kind === 'CronJob').map((o) => o.metadata.name);
    assert.ok(cronjobs.length > 0, `${overlay} has CronJobs`);
    for (const cj of cronjobs) {
      const end = await runJob(cluster, node, cj);
      assert.is(end.condition, 'Complete', `${overlay} ${cj}: ${summary(end)}`);
      assert.ok(has(end, 'run.finished'), `${overlay} ${cj} logged its run`);
    }
    await uninstall(cluster, objs);
    delete ctx.installed;
  }
  const objs = renderOverlay('scheduler');
  ctx.installed = objs;
  apply(cluster, objs);
  kubectl(cluster, ['rollout', 'status', 'deployment/twopass-scheduler', '-n', NS, '--timeout=180s']);
  const pod = await poll(
    'the scheduler pod',
    () =>
      (
        JSON.parse(
          kubectl(cluster, [
            'get',
            'pods',
            '-n',
            NS,
            '-l',
            'app.kubernetes.io/component=scheduler',
            '-o',
            'json',
          ]),
        ).items as Obj[]
      )[0]?.metadata.name,
    60_000,
  );
  const log = podLog(node, NS, pod, 'twopass');
  assert.match(log, /danm-endpoints/, `the scheduler logs its functions: ${log.slice(-800)}`);
});

it('the lbaas-ports overlay beside a running controller Deployment (a real pod on the node): its Jobs read the clouds.yaml Secret and hold the orphan port while the controller runs; scaled to 0, the next Job deletes it through the real Keystone + Neutron (host network: the test OpenStack listens on loopback)', async (ctx) => {
  const os = realOpenStack();
  if (!os) {
    console.log('  !!! no real Keystone + Neutron: the lbaas-ports overlay on the node is not run');
    if (process.env.TWOPASS_REQUIRE_REAL_OPENSTACK === '1') throw new Error('the real OpenStack is required');
    return;
  }
  const { cluster, node, kube } = ctx;
  const { controllerPort, exists } = realWorld(os);
  const objs = withConfig(renderOverlay('lbaas-ports'), (c) => {
    shortGrace('lbaas-ports')(c);
    const fn = (c.functions as Record<string, Record<string, unknown>>)['lbaas-ports']!;
    fn.settings = { ...(fn.settings as object), projectId: os.project.id };
  });
  // The one change to the shipped CronJob: the test's Keystone and Neutron are on the host's loopback.
  const cj = objs.find((o) => o.kind === 'CronJob')!;
  const pod = (cj.spec as { jobTemplate: { spec: { template: { spec: Record<string, unknown> } } } })
    .jobTemplate.spec.template.spec;
  pod.hostNetwork = true;
  // The ch-k8s-lbaas controller where the overlay's Role reads it: a Deployment whose pod the
  // kube-controller-manager and the kubelet really run (the local pause image stands in).
  const labels = { app: 'ch-k8s-lbaas-controller' };
  objs.push({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'ch-k8s-lbaas-controller', namespace: 'kube-system' },
    spec: {
      replicas: 1,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          containers: [{ name: 'controller', image: 'localhost/pause:test', imagePullPolicy: 'Never' }],
          terminationGracePeriodSeconds: 1,
        },
      },
    },
  } as unknown as Obj);
  ctx.installed = objs;
  kubectl(cluster, ['create', 'namespace', NS]);
  kubectl(cluster, [
    'create',
    'secret',
    'generic',
    'twopass-openstack',
    '-n',
    NS,
    `--from-literal=clouds.yaml=clouds:\n  openstack:\n    auth_type: v3applicationcredential\n    region_name: ${os.region}\n    interface: public\n    auth:\n      auth_url: ${os.authUrl}\n      application_credential_id: ${os.appCred.id}\n      application_credential_secret: ${os.appCred.secret}\n`,
  ]);
  apply(cluster, objs);
  const orphan = await controllerPort();
  const used = await controllerPort();
  await kube.create(NAMESPACES, { metadata: { name: 'apps-lbaas' } });
  await createService(kube, 'apps-lbaas', 'web', { portId: used.port.id });
  const controllerPods = () =>
    JSON.parse(
      kubectl(cluster, [
        'get',
        'pods',
        '-n',
        'kube-system',
        '-l',
        'app=ch-k8s-lbaas-controller',
        '-o',
        'json',
      ]),
    ).items as { status: { phase: string } }[];
  await poll(
    'the controller pod running',
    () => (controllerPods()[0]?.status.phase === 'Running' ? true : undefined),
    120_000,
  );
  const first = await runJob(cluster, node, 'twopass-lbaas-ports');
  assert.is(first.condition, 'Complete', summary(first));
  await new Promise((r) => setTimeout(r, 2500));
  const held = await runJob(cluster, node, 'twopass-lbaas-ports');
  assert.is(held.condition, 'Complete', `a held run is not a failed Job: ${summary(held)}`);
  assert.ok(has(held, 'run.held'), summary(held));
  assert.not.ok(has(held, 'resource.deleted'), summary(held));
  assert.ok(await exists('ports', orphan.port.id), 'held while the controller runs');
  // The operator's procedure: scale it to 0 and wait for its pod to go.
  kubectl(cluster, ['scale', 'deployment/ch-k8s-lbaas-controller', '-n', 'kube-system', '--replicas=0']);
  await poll('the controller pod gone', () => (controllerPods().length === 0 ? true : undefined), 120_000);
  const second = await runJob(cluster, node, 'twopass-lbaas-ports');
  assert.is(second.condition, 'Complete', summary(second));
  assert.ok(has(second, 'controller.stopped'), summary(second));
  assert.ok(has(second, 'resource.deleted', orphan.port.id), summary(second));
  assert.not.ok(await exists('ports', orphan.port.id), 'the orphan port is gone');
  assert.ok(await exists('ports', used.port.id), 'the used one stays');
});

it("at 150,000 pods and DanmEps, the CronJob's pod completes under its 512Mi limit with the image's heap cap (peak printed)", async ({
  kube,
  node,
}) => {
  const template = (shippedCronJob().spec.jobTemplate.spec as { template: { spec: Record<string, unknown> } })
    .template;
  const r = await memoryRun(kube, node, template, 150_000);
  console.log(
    `\n  danm-endpoints at 150,000 in the CronJob's pod: ${r.phase}, exit ${r.exitCode}, peak ${r.peakMiB} MiB of ${r.limit}, ${r.seconds} s`,
  );
  assert.is.not(r.reason, 'OOMKilled', `killed at the limit; peak ${r.peakMiB} MiB`);
  assert.is(r.phase, 'Succeeded', r.log.slice(-1500));
  assert.ok(r.peakMiB > 0, 'the peak was read from the cgroup');
  const finished = r.log
    .split('\n')
    .filter((l) => l.includes('"run.finished"'))
    .map((l) => JSON.parse(l) as { summary?: { targets: number; newCandidates: number } })[0];
  assert.ok(finished?.summary && finished.summary.targets >= 150_000, 'every target listed');
  assert.is(finished.summary.newCandidates, 1500, '1% orphaned, found');
});

test.run();
