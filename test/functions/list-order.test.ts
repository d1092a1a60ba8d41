/** Law 2: every function lists its targets before the evidence of their use. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { whereaboutsIps } from '../../functions/whereabouts-ips/index.ts';
import { createEndpoint, createNetwork, createPod } from '../../shared/sandbox/scenarios/danm.ts';
import { danmRunner } from '../helpers/danm.ts';
import { fakeTarget } from '../helpers/kube-target.ts';
import { runner } from '../helpers/runner.ts';

test('networks, then DanmEps, then Pods (metadata only)', async () => {
  const t = await fakeTarget();
  try {
    const kube = t.client();
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.5']);
    await createEndpoint(kube, await createPod(kube, ns, 'a-0'), 'test-net1', '10.10.10.5/24');
    await kube.close();
    const fake = t.fake!;
    const from = fake.requests.length;
    await danmRunner(t.options, [ns], Date.now()).run();
    const lists = fake.requests.slice(from).filter((r) => r.method === 'GET' && r.query.includes('limit='));
    const order = lists.map((r) => r.path.split('/').pop());
    assert.equal(order, ['danmnets', 'tenantnetworks', 'clusternetworks', 'danmeps', 'pods']);
  } finally {
    await t.close();
  }
});

test('whereabouts: pools, then reservations, then Pods', async () => {
  const t = await fakeTarget();
  try {
    const ns = await t.namespace();
    const fake = t.fake!;
    const from = fake.requests.length;
    await runner(whereaboutsIps, t.options, [ns], Date.now()).run();
    const lists = fake.requests.slice(from).filter((r) => r.method === 'GET' && r.query.includes('limit='));
    assert.equal(
      lists.map((r) => r.path.split('/').pop()),
      ['ippools', 'overlappingrangeipreservations', 'pods'],
    );
  } finally {
    await t.close();
  }
});

test.run();
