/**
 * Fault matrices for whereabouts-ips (Kubernetes faults) and lbaas-ports (Kubernetes
 * and Neutron/Keystone faults): every call a run makes x the faults. Each cell must
 * end in a completed run, an aborted run (exit 3) that deleted nothing and left the
 * state as it was, or a skipped/failed deletion; the address or port in use survives.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { lbaasPorts } from '../../functions/lbaas-ports/index.ts';
import { whereaboutsIps } from '../../functions/whereabouts-ips/index.ts';
import { LISTED_PODS_PER_GET } from '../../functions/whereabouts-ips/kinds.ts';
import { resolveConfig } from '../../shared/config.ts';
import type { AnyFunction } from '../../shared/contract/index.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { DEPLOYMENTS, NAMESPACES } from '../../shared/kube/resources.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { controllerPort, createService } from '../../shared/sandbox/scenarios/lbaas.ts';
import {
  allocations,
  containerId,
  createPodWithStatus,
  createPool,
} from '../../shared/sandbox/scenarios/whereabouts.ts';
import { captureLog } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';
import { FAULTS, type MatrixFault, tableDiff } from './faults.ts';

type Where = 'kube' | 'os';
type Call = {
  name: string;
  where: Where;
  method: string;
  path: RegExp;
  nth: number;
  paged?: boolean;
  write?: boolean;
};

type World = { check: () => Promise<{ liveOk: boolean; orphanGone: boolean }> };

async function cell(
  fn: AnyFunction,
  call: Call,
  f: MatrixFault,
  setup: (kube: KubeHttpClient, os: FakeOpenStack) => Promise<World>,
  settings: Record<string, unknown>,
  graceMin: number,
): Promise<string> {
  const fake = new FakeKubeServer();
  await fake.start();
  const os = new FakeOpenStack();
  await os.start();
  const kube = new KubeHttpClient({ server: fake.url, time: testTime() });
  try {
    await installCrdsFromDir(kube);
    await kube.create(NAMESPACES, { metadata: { name: 'faults' } });
    const w = await setup(kube, os);
    const dir = mkdtempSync(join(tmpdir(), 'twopass-fault-'));
    writeFileSync(join(dir, 'clouds.yaml'), os.cloudsYaml());
    const processEnv = { OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') };
    const cfg = resolveConfig(
      {
        callTimeout: 400,
        pageSize: 2,
        functions: {
          [fn.name]: { enabled: true, maxDeletionPercent: 100, maxEvidenceDropPercent: 100, settings },
        },
      },
      'faults',
      { state: `file:${dir}` },
    );
    let now = Date.now() + MIN;
    const kubeOptions = { server: fake.url, time: testTime() };
    await runFunction(
      fn,
      cfg,
      { time: testTime(() => now), log: captureLog(() => now).log, kubeOptions, processEnv },
      { apply: true },
    );
    const stateBefore = readFileSync(join(dir, `${fn.name}.json`), 'utf8');
    now += graceMin * MIN;
    const plan = call.where === 'kube' ? fake.faults : os.faults;
    plan.add({ method: call.method, path: call.path, nth: call.nth, ...f.fault });
    const cap = captureLog(() => now);
    const r = await runFunction(
      fn,
      cfg,
      { time: testTime(() => now), log: cap.log, kubeOptions, processEnv },
      { apply: true },
    );
    const fired = plan.fired() > 0;
    plan.clear();
    const { liveOk, orphanGone } = await w.check();
    const where = `${fn.name}: ${call.name} x ${f.name}`;
    assert.ok(liveOk, `${where}: something in use was deleted`);
    // Every cell of the matrix is a call the run makes: a fault that never fired is a test that tested nothing.
    assert.ok(fired, `${where}: the fault never fired`);
    if (r.exitCode === 3) {
      assert.not.ok(orphanGone, `${where}: aborted but deleted`);
      assert.is(
        readFileSync(join(dir, `${fn.name}.json`), 'utf8'),
        stateBefore,
        `${where}: aborted but the state changed`,
      );
      assert.ok(String(cap.events('run.aborted')[0]?.reason ?? '').length > 0);
      return 'abort';
    }
    if (r.exitCode === 2) {
      // refused credentials (401/403 on the token) are a configuration error: nothing observed, nothing deleted
      assert.ok(
        call.name.startsWith('keystone') && (f.name === '403' || f.name === '401'),
        `${where}: exit 2`,
      );
      assert.not.ok(orphanGone, `${where}: a configuration error but deleted`);
      assert.match(String(cap.events('run.aborted')[0]?.reason), /check the credentials/);
      return 'config (exit 2)';
    }
    // lbaas-ports counts the port and its floating IP, each a deletion
    if (r.exitCode === 0 && r.deleted.length >= 1) {
      assert.ok(orphanGone, `${where}: exit 0 with a deletion, but the orphan is still there`);
      return 'ok';
    }
    // lbaas-ports: the controller that cannot be read right before or after a DELETE counts as running
    if (r.outcome === 'held') {
      assert.ok(
        cap.events('delete.held').length + cap.events('act.stopped').length > 0,
        `${where}: held, unsaid`,
      );
      return orphanGone ? 'deleted, then held (told unproven)' : 'held';
    }
    const lines = cap.events('delete.failed').concat(cap.events('delete.skipped'));
    assert.ok(lines.length > 0, `${where}: exit ${r.exitCode} without a delete.failed/skipped line`);
    return orphanGone ? 'deleted, unconfirmed' : r.failed.length ? 'delete failed' : 'skipped';
  } finally {
    await kube.close();
    await fake.stop();
    await os.stop();
  }
}

async function matrix(
  fn: AnyFunction,
  calls: Call[],
  setup: Parameters<typeof cell>[3],
  settings: Record<string, unknown>,
  graceMin: number,
): Promise<string> {
  const rows = [
    `| ${fn.name} call | ${FAULTS.map((f) => f.name).join(' | ')} |`,
    `|${'---|'.repeat(FAULTS.length + 1)}`,
  ];
  for (const call of calls) {
    const out: string[] = [];
    for (const f of FAULTS)
      out.push(f.pagedOnly && !call.paged ? 'n/a' : await cell(fn, call, f, setup, settings, graceMin));
    rows.push(`| ${call.name} | ${out.join(' | ')} |`);
  }
  return rows.join('\n');
}

/** What each whereabouts-ips cell must come to. */
const WHEREABOUTS_EXPECTED = `
| whereabouts-ips call | 500 | 503 | 429+RA | timeout | reset | truncated | 403 | 410 | empty page |
|---|---|---|---|---|---|---|---|---|---|
| discover whereabouts | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list ippools | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list pods p1 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list pods p2 | ok | ok | ok | ok | ok | ok | abort | ok | abort |
| recheck get pod | ok | ok | ok | ok | ok | ok | delete failed | n/a | n/a |
| patch pool | delete failed | delete failed | delete failed | delete failed | delete failed | ok | delete failed | n/a | n/a |
| create event | ok | ok | ok | ok | ok | ok | ok | n/a | n/a |
`;

test('whereabouts-ips: every call x every fault', async () => {
  const calls: Call[] = [
    {
      name: 'discover whereabouts',
      where: 'kube',
      method: 'GET',
      path: /^\/apis\/whereabouts\.cni\.cncf\.io\/v1alpha1(\?|$)/,
      nth: 1,
    },
    { name: 'list ippools', where: 'kube', method: 'GET', path: /\/ippools\?/, nth: 1 },
    { name: 'list pods p1', where: 'kube', method: 'GET', path: /\/api\/v1\/pods\?/, nth: 1 },
    { name: 'list pods p2', where: 'kube', method: 'GET', path: /\/api\/v1\/pods\?/, nth: 2, paged: true },
    // the pool is not read before its patch (the patch tests each allocation as observed)
    { name: 'recheck get pod', where: 'kube', method: 'GET', path: /\/pods\/gone-0$/, nth: 1 },
    { name: 'patch pool', where: 'kube', method: 'PATCH', path: /\/ippools\/pool$/, nth: 1, write: true },
    { name: 'create event', where: 'kube', method: 'POST', path: /\/events$/, nth: 1, write: true },
  ];
  const table = await matrix(
    whereaboutsIps,
    calls,
    async (kube) => {
      const live = containerId();
      await createPool(kube, 'faults', 'pool', '192.168.2.0/24', {
        '192.168.2.10': { id: live, podref: 'faults/live-0' },
        '192.168.2.11': { id: containerId(), podref: 'faults/gone-0' },
      });
      for (const [n, ip] of [
        ['live-0', '192.168.2.10'],
        ['x-1', '192.168.2.90'],
        ['x-2', '192.168.2.91'],
      ] as const)
        await createPodWithStatus(kube, 'faults', n, [ip]);
      // more pods than a GET costs to list: the re-check reads the named pod by name (and the
      // pods list's second page is one of many: emptied, it ends the run as incomplete)
      for (let i = 0; i < LISTED_PODS_PER_GET; i++)
        await createPodWithStatus(kube, 'faults', `y-${i}`, [`192.168.2.${150 + i}`]);
      return {
        check: async () => {
          const a = await allocations(kube, 'faults', 'pool');
          return {
            liveOk: Object.values(a).some((x) => x.id === live),
            orphanGone: !Object.values(a).some((x) => x.podref === 'faults/gone-0'),
          };
        },
      };
    },
    {},
    6,
  );
  console.log(`\n${table}\n`);
  const diff = tableDiff(table, WHEREABOUTS_EXPECTED);
  assert.equal(diff, [], `cells that moved:\n${diff.join('\n')}`);
});

/** What each lbaas-ports cell must come to. */
const LBAAS_EXPECTED = `
| lbaas-ports call | 500 | 503 | 429+RA | timeout | reset | truncated | 403 | 410 | empty page |
|---|---|---|---|---|---|---|---|---|---|
| keystone token | ok | ok | ok | ok | ok | ok | config (exit 2) | n/a | n/a |
| list tagged ports p1 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list tagged ports p2 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list floating IPs | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list project ports | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list services p1 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list services p2 | ok | ok | ok | ok | ok | ok | abort | ok | ok |
| recheck get port | ok | ok | ok | ok | ok | ok | delete failed | n/a | n/a |
| recheck get FIP | ok | ok | ok | ok | ok | ok | delete failed | n/a | n/a |
| recheck list services | ok | ok | ok | ok | ok | ok | delete failed | n/a | n/a |
| extensions | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| delete FIP | deleted, unconfirmed | deleted, unconfirmed | deleted, unconfirmed | deleted, unconfirmed | deleted, unconfirmed | ok | deleted, unconfirmed | n/a | n/a |
| delete port | delete failed | delete failed | delete failed | delete failed | delete failed | ok | delete failed | n/a | n/a |
| confirm get port | ok | ok | ok | ok | ok | ok | deleted, unconfirmed | n/a | n/a |
| get controller Deployment #1 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list controller pods #1 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| get controller Deployment #2 | ok | ok | ok | ok | ok | ok | held | n/a | n/a |
| list controller pods #2 | ok | ok | ok | ok | ok | ok | held | n/a | n/a |
| get controller Deployment #3 | ok | ok | ok | ok | ok | ok | deleted, then held (told unproven) | n/a | n/a |
| list controller pods #3 | ok | ok | ok | ok | ok | ok | deleted, then held (told unproven) | n/a | n/a |
`;

const CONTROLLER_DEPLOY = /^\/apis\/apps\/v1\/namespaces\/kube-system\/deployments\/ch-k8s-lbaas-controller$/;
const CONTROLLER_PODS = /^\/api\/v1\/namespaces\/kube-system\/pods\?/;

test('lbaas-ports: every call x every fault (Kubernetes, Keystone, Neutron)', async () => {
  const calls: Call[] = [
    { name: 'keystone token', where: 'os', method: 'POST', path: /\/auth\/tokens$/, nth: 1 },
    { name: 'list tagged ports p1', where: 'os', method: 'GET', path: /\/ports\?.*tags=/, nth: 1 },
    { name: 'list tagged ports p2', where: 'os', method: 'GET', path: /\/ports\?.*tags=/, nth: 2 },
    { name: 'list floating IPs', where: 'os', method: 'GET', path: /\/floatingips\?/, nth: 1 },
    { name: 'list project ports', where: 'os', method: 'GET', path: /\/ports\?(?!.*tags=)/, nth: 1 },
    { name: 'list services p1', where: 'kube', method: 'GET', path: /\/api\/v1\/services\?/, nth: 1 },
    {
      name: 'list services p2',
      where: 'kube',
      method: 'GET',
      path: /\/api\/v1\/services\?/,
      nth: 2,
      paged: true,
    },
    { name: 'recheck get port', where: 'os', method: 'GET', path: /\/ports\/[^?]+$/, nth: 1 },
    { name: 'recheck get FIP', where: 'os', method: 'GET', path: /\/floatingips\/[^?]+$/, nth: 1 },
    { name: 'recheck list services', where: 'kube', method: 'GET', path: /\/api\/v1\/services\?/, nth: 3 },
    { name: 'extensions', where: 'os', method: 'GET', path: /\/extensions$/, nth: 1 },
    { name: 'delete FIP', where: 'os', method: 'DELETE', path: /\/floatingips\//, nth: 1, write: true },
    { name: 'delete port', where: 'os', method: 'DELETE', path: /\/ports\//, nth: 1, write: true },
    { name: 'confirm get port', where: 'os', method: 'GET', path: /\/ports\/[^?]+$/, nth: 2 },
    // the ch-k8s-lbaas controller: in the pass, right before the DELETE, and after it
    ...[1, 2, 3].flatMap((nth): Call[] => [
      {
        name: `get controller Deployment #${nth}`,
        where: 'kube',
        method: 'GET',
        path: CONTROLLER_DEPLOY,
        nth,
      },
      { name: `list controller pods #${nth}`, where: 'kube', method: 'GET', path: CONTROLLER_PODS, nth },
    ]),
  ];
  const table = await matrix(
    lbaasPorts,
    calls,
    async (kube, os) => {
      const live = controllerPort(os, {});
      const other = controllerPort(os, {});
      const orphan = controllerPort(os, {});
      await createService(kube, 'faults', 'app', { portId: live.port.id });
      await createService(kube, 'faults', 'app-2', { portId: other.port.id });
      await createService(kube, 'faults', 'plain', { managed: false, type: 'ClusterIP' });
      // the controller scaled to 0, as the operator's procedure leaves it
      await kube.create(DEPLOYMENTS, {
        metadata: { name: 'ch-k8s-lbaas-controller', namespace: 'kube-system' },
        spec: { replicas: 0, selector: { matchLabels: { app: 'ch-k8s-lbaas-controller' } } },
      });
      return {
        check: async () => ({
          liveOk: os.ports.has(live.port.id) && os.fips.has(live.fip!.id) && os.ports.has(other.port.id),
          orphanGone: !os.ports.has(orphan.port.id),
        }),
      };
    },
    { projectId: 'project-a' },
    31,
  );
  console.log(`\n${table}\n`);
  const diff = tableDiff(table, LBAAS_EXPECTED);
  assert.equal(diff, [], `cells that moved:\n${diff.join('\n')}`);
});

test.run();
