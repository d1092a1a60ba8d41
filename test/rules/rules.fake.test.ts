import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { PODS } from '../../shared/kube/resources.ts';
import { ruleFunction } from '../../shared/rules/function.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { CILIUM, createEndpoint } from '../../shared/sandbox/scenarios/cilium.ts';
import { createPodObject } from '../../shared/sandbox/scenarios/danm.ts';
import { fakeTarget } from '../helpers/kube-target.ts';
import { runner } from '../helpers/runner.ts';
import { targetSuite } from '../helpers/target-suite.ts';
import { pack, ruleScenarios } from './rule-scenarios.ts';

ruleScenarios('fake API server', () => fakeTarget());

// Faults only the fake can inject: an evidence list that fails midway.
const { it, run } = targetSuite('rule packs: an evidence list that fails (fake API server)', () =>
  fakeTarget(),
);

it('the pod list fails on its second page: the run aborts (exit 3) and nothing is deleted, then or later', async (t, kube) => {
  const ns = await t.namespace();
  const p = await createPodObject(kube, ns, 'gone-0');
  for (let i = 0; i < 3; i++) await createPodObject(kube, ns, `live-${i}`);
  const _ep = await createEndpoint(kube, p, 3001);
  await kube.deleteWithPreconditions(PODS, ns, 'gone-0', {
    uid: p.metadata.uid,
    resourceVersion: p.metadata.resourceVersion,
  });
  const r = runner(ruleFunction(pack('cilium-endpoints')), t.options, [ns], Date.now(), {
    settings: { namespaces: [ns], pageSize: 1 },
  });
  assert.is((await r.run()).exitCode, EXIT.ok);
  t.fake!.faults.add({ method: 'GET', path: /\/api\/v1\/pods\?.*continue=/, status: 500, times: 10 });
  r.now += 30 * MIN;
  const failed = await r.run();
  assert.is(failed.exitCode, EXIT.incomplete);
  assert.equal(failed.deleted, []);
  assert.ok(await kube.get(CILIUM.endpoints, ns, 'gone-0'), 'the endpoint is still there');
  assert.ok(r.events('run.aborted').length >= 1, 'the log says the run aborted');
});

run();
