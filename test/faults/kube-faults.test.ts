/**
 * Fault matrix: every call a danm-endpoints run makes x every fault. Each cell must
 * end in a complete retry (the orphan reclaimed) or an aborted run (exit 3) with
 * zero deletions and the state intact; a fault on a write ends in a skipped or
 * failed deletion. In every cell the live endpoint and its address survive, and a
 * failing run names the call and the fault. Prints the matrix.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { CONFIGMAPS, type KubeObject, NAMESPACES } from '../../shared/kube/resources.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import {
  allocated,
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
  R,
} from '../../shared/sandbox/scenarios/danm.ts';
import { captureLog } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';
import { FAULTS, type MatrixFault, tableDiff } from './faults.ts';

type Call = {
  name: string;
  method: string;
  path: RegExp;
  nth: number;
  paged?: boolean;
  write?: boolean;
  configmapState?: boolean;
};
const CALLS: Call[] = [
  { name: 'discover danm', method: 'GET', path: /^\/apis\/danm\.k8s\.io\/v1(\?|$)/, nth: 1 },
  { name: 'list danmnets', method: 'GET', path: /\/danmnets\?/, nth: 1 },
  { name: 'list danmeps p1', method: 'GET', path: /\/danmeps\?/, nth: 1 },
  { name: 'list danmeps p2', method: 'GET', path: /\/danmeps\?/, nth: 2, paged: true },
  { name: 'list pods p1', method: 'GET', path: /\/api\/v1\/pods\?/, nth: 1 },
  { name: 'list pods p2', method: 'GET', path: /\/api\/v1\/pods\?/, nth: 2, paged: true },
  // (no GET of a DanmEp by name: a batch re-checks against fresh lists, its tombstone is the
  // object as the fresh list gave it, and a DELETE answered with its UID is not read back)
  // (no 'recheck get pod': a batch re-checks a DanmEp against fresh pod lists, never a GET by name)
  { name: 'delete danmep', method: 'DELETE', path: /\/danmeps\//, nth: 1, write: true },
  // (no 'read network' after the update: the update's own answer, the network at a new
  // resourceVersion, is its read-back; a GET follows only an answer that shows nothing, as
  // the 'update network' row's unreadable answers do)
  { name: 'fresh list danmeps', method: 'GET', path: /\/danmeps\?/, nth: 3 },
  { name: 'update network', method: 'PUT', path: /\/danmnets\/test-net1$/, nth: 1, write: true },
  { name: 'create event', method: 'POST', path: /\/events$/, nth: 1, write: true },
  // with in-cluster state: the Lease and the state ConfigMap
  {
    name: 'lease read',
    method: 'GET',
    path: /\/leases\/twopass-danm-endpoints$/,
    nth: 1,
    configmapState: true,
  },
  {
    name: 'lease update',
    method: 'PUT',
    path: /\/leases\/twopass-danm-endpoints$/,
    nth: 1,
    write: true,
    configmapState: true,
  },
  {
    name: 'state read',
    method: 'GET',
    path: /\/configmaps\/twopass-danm-endpoints$/,
    nth: 1,
    configmapState: true,
  },
  {
    name: 'state write',
    method: 'PUT',
    path: /\/configmaps\/twopass-danm-endpoints$/,
    nth: 1,
    write: true,
    configmapState: true,
  },
];

async function cell(call: Call, f: MatrixFault): Promise<string> {
  const fake = new FakeKubeServer();
  await fake.start();
  const kube = new KubeHttpClient({ server: fake.url, time: testTime() });
  try {
    await installCrdsFromDir(kube, 'danm');
    const ns = 'faults';
    await kube.create(NAMESPACES, { metadata: { name: ns } });
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.5', '10.10.10.6', '10.10.10.7']);
    const live: KubeObject[] = [];
    for (const [i, ip] of ['10.10.10.5', '10.10.10.6'].entries())
      live.push(await createEndpoint(kube, await createPod(kube, ns, `live-${i}`), 'test-net1', `${ip}/24`));
    await createPod(kube, ns, 'live-2', undefined, 'other-net'); // a pod on another network
    const orphan = await createEndpoint(
      kube,
      await createPod(kube, ns, 'gone-0'),
      'test-net1',
      '10.10.10.7/24',
    );
    await forceDeletePod(kube, ns, 'gone-0');
    const dir = mkdtempSync(join(tmpdir(), 'twopass-fault-'));
    const cfg = resolveConfig(
      { callTimeout: 400, pageSize: 2, functions: { 'danm-endpoints': { maxDeletionPercent: 100 } } },
      'faults',
      { state: call.configmapState ? 'configmap:faults' : `file:${dir}` },
    );
    let now = Date.now() + MIN;
    const opts = { server: fake.url, time: testTime() };
    await runFunction(
      danmEndpoints,
      cfg,
      { time: testTime(() => now), log: captureLog(() => now).log, kubeOptions: opts },
      { apply: true },
    );
    const readState = async () =>
      call.configmapState
        ? JSON.stringify((await kube.get(CONFIGMAPS, 'faults', 'twopass-danm-endpoints'))?.binaryData ?? null)
        : readFileSync(join(dir, 'danm-endpoints.json'), 'utf8');
    const stateBefore = await readState();
    now += 6 * MIN;
    fake.faults.add({ method: call.method, path: call.path, nth: call.nth, ...f.fault });
    const cap = captureLog(() => now);
    const r = await runFunction(
      danmEndpoints,
      cfg,
      { time: testTime(() => now), log: cap.log, kubeOptions: opts },
      { apply: true },
    );
    const fired = fake.faults.fired() > 0;
    fake.faults.clear();
    // Safety in every cell: the live endpoints and their addresses survive.
    for (const ep of live)
      assert.ok(
        await kube.get(R.danmeps, ns, ep.metadata.name),
        `${call.name} x ${f.name}: a live DanmEp was deleted`,
      );
    const bits = allocated((await kube.get(R.DanmNet, ns, 'test-net1'))!);
    assert.ok(
      bits.includes('10.10.10.5') && bits.includes('10.10.10.6'),
      `${call.name} x ${f.name}: a live address was freed`,
    );
    const orphanGone = !(await kube.get(R.danmeps, ns, orphan.metadata.name));
    if (r.exitCode === 3) {
      assert.not.ok(orphanGone, `${call.name} x ${f.name}: aborted but deleted`);
      // a truncated answer to the state write: the server applied it, the run cannot know and aborts
      const landed = call.name === 'state write' && f.name === 'truncated';
      if (landed) return 'abort (write landed)';
      assert.is(await readState(), stateBefore, `${call.name} x ${f.name}: aborted but state changed`);
      const reason = String(cap.events('run.aborted')[0]?.reason ?? '');
      assert.ok(reason.length > 0, 'the abort says why');
      assert.ok(fired, `${call.name} x ${f.name}: aborted, but not by the fault (it never fired)`);
      return 'abort';
    }
    if (r.exitCode === 0 && r.deleted.length === 1) {
      assert.ok(orphanGone);
      assert.ok(fired, `${call.name} x ${f.name}: the fault never fired`);
      return bits.includes('10.10.10.7') ? 'ok, bit leaked' : 'ok';
    }
    if (r.exitCode === 0 && r.deleted.length === 0 && r.alreadyGone?.length === 1) {
      // the DELETE's answer was lost and a read finds it gone: it cannot be told from someone
      // else's delete, so it is said as gone (resource.gone, why), not claimed as a deletion
      assert.ok(orphanGone);
      assert.ok(fired, `${call.name} x ${f.name}: the fault never fired`);
      const line = cap.events('resource.gone')[0];
      assert.match(String(line?.detail), /unknown answer .*read back: gone/);
      return 'gone, answer lost';
    }
    if (call.write || r.failed.length > 0 || r.skipped.length > 0) {
      const failed = cap.events('delete.failed').concat(cap.events('delete.skipped'));
      assert.ok(
        failed.length > 0,
        `${call.name} x ${f.name}: exit ${r.exitCode} without a delete.failed/skipped line`,
      );
      return orphanGone ? 'deleted, unconfirmed' : r.failed.length ? 'delete failed' : 'skipped';
    }
    throw new Error(`${call.name} x ${f.name}: unexpected outcome exit ${r.exitCode} ${JSON.stringify(r)}`);
  } finally {
    await kube.close();
    await fake.stop();
  }
}

/** What each cell must come to (the legend is printed with the matrix). */
const EXPECTED = `
| call | 500 | 503 | 429+RA | timeout | reset | truncated | 403 | 410 | empty page |
|---|---|---|---|---|---|---|---|---|---|
| discover danm | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list danmnets | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list danmeps p1 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list danmeps p2 | ok | ok | ok | ok | ok | ok | abort | ok | ok |
| list pods p1 | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| list pods p2 | ok | ok | ok | ok | ok | ok | abort | ok | ok |
| delete danmep | delete failed | delete failed | delete failed | delete failed | delete failed | gone, answer lost | delete failed | n/a | n/a |
| fresh list danmeps | ok | ok | ok | ok | ok | ok | delete failed | n/a | n/a |
| update network | ok, bit leaked | ok, bit leaked | ok, bit leaked | ok, bit leaked | ok, bit leaked | ok | ok, bit leaked | n/a | n/a |
| create event | ok | ok | ok | ok | ok | ok | ok | n/a | n/a |
| lease read | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| lease update | abort | abort | abort | abort | abort | abort | abort | n/a | n/a |
| state read | ok | ok | ok | ok | ok | ok | abort | n/a | n/a |
| state write | abort | abort | abort | abort | abort | abort (write landed) | abort | n/a | n/a |
`;

test('fault matrix: every call x every fault', async () => {
  const rows: string[] = [];
  const header = `| call | ${FAULTS.map((f) => f.name).join(' | ')} |`;
  rows.push(header, `|${'---|'.repeat(FAULTS.length + 1)}`);
  let cells = 0;
  for (const call of CALLS) {
    const out: string[] = [];
    for (const f of FAULTS) {
      if (f.pagedOnly && !call.paged) {
        out.push('n/a');
        continue;
      }
      out.push(await cell(call, f));
      cells++;
    }
    rows.push(`| ${call.name} | ${out.join(' | ')} |`);
  }
  console.log(
    `\n${rows.join('\n')}\n(${cells} cells. abort: exit 3, nothing deleted, state intact. ok: the run completed, failed reads retried. ` +
      'delete failed: a re-check or the delete itself failed, nothing deleted, exit 1. deleted, unconfirmed: the server deleted it but the answer or the confirming read failed, exit 1. ' +
      'ok, bit leaked: the DanmEp was deleted, its address left set for a later run to reclaim as a leaked bit. ' +
      "gone, answer lost: the DELETE's answer was lost and a read finds the DanmEp gone; as it cannot be told from a delete by someone else, it is logged as resource.gone (not counted as a deletion) and its address is left for a later run.)\n",
  );
  assert.ok(cells > 100);
  const diff = tableDiff(rows.join('\n'), EXPECTED);
  assert.equal(diff, [], `cells that moved:\n${diff.join('\n')}`);
});

test.run();
