/**
 * The rule packs end to end, on a KubeTarget (the real kube-apiserver in
 * rules.real.test.ts, the fake in rules.fake.test.ts): each pack's two observations,
 * the re-created-pod race for CiliumEndpoints, and bad input (a missing field, an
 * expression that errors, an evidence list that fails or is not served).
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { EVENTS, type KubeObject, PODS } from '../../shared/kube/resources.ts';
import { packageRoot } from '../../shared/paths.ts';
import { ruleFunction } from '../../shared/rules/function.ts';
import { compileRule, loadRuleFile, type RuleFile } from '../../shared/rules/rule.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import {
  adoptEndpoint,
  CILIUM,
  createEndpoint,
  createIdentity,
  createSlice,
  identityId,
} from '../../shared/sandbox/scenarios/cilium.ts';
import {
  createEndpoint as createDanmEp,
  createNetwork,
  createPodObject,
  R,
} from '../../shared/sandbox/scenarios/danm.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import { intercept, writeRecorder } from '../helpers/intercept.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { runner } from '../helpers/runner.ts';
import { parsed } from '../helpers/settings.ts';
import { targetSuite } from '../helpers/target-suite.ts';

export const pack = (name: string) => loadRuleFile(`${packageRoot()}/functions/rules/${name}/rule.yaml`)[0]!;
const fnOf = (name: string) => ruleFunction(pack(name));
/** A pack with some fields replaced (a broken variant). */
const variant = (name: string, change: Partial<RuleFile>) =>
  ruleFunction(compileRule({ ...pack(name).file, ...change }, 'test variant'));

export function ruleScenarios(label: string, getTarget: () => Promise<KubeTarget | undefined>): void {
  const { it, run } = targetSuite(`rule packs (${label})`, getTarget);

  const exists = async (
    kube: KubeHttpClient,
    ref: typeof CILIUM.endpoints | typeof CILIUM.identities,
    o: KubeObject,
  ) => (await kube.get(ref, o.metadata.namespace, o.metadata.name))?.metadata.uid === o.metadata.uid;
  const pod = (kube: KubeHttpClient, ns: string, name: string) => createPodObject(kube, ns, name);
  const gone = (kube: KubeHttpClient, p: KubeObject) =>
    kube.deleteWithPreconditions(PODS, p.metadata.namespace, p.metadata.name, {
      uid: p.metadata.uid,
      resourceVersion: p.metadata.resourceVersion,
    });

  it('cilium-endpoints: the endpoint of a gone Pod goes after two observations; a live one stays', async (t, kube) => {
    const ns = await t.namespace();
    const live = await pod(kube, ns, 'live-0');
    const dead = await pod(kube, ns, 'dead-0');
    const liveEp = await createEndpoint(kube, live, 1001);
    const deadEp = await createEndpoint(kube, dead, 1002);
    await gone(kube, dead);
    const r = runner(fnOf('cilium-endpoints'), t.options, [ns], Date.now());
    const first = await r.run();
    assert.is(first.exitCode, EXIT.ok);
    assert.equal(first.deleted, []);
    assert.equal(
      r.events('candidate.new').map((e) => e.name),
      [`${ns}/dead-0`],
      'the first observation only records the endpoint',
    );
    r.now += 11 * MIN;
    const writes = writeRecorder();
    r.intercept = writes.wrap;
    const second = await r.run();
    delete r.intercept;
    assert.equal(second.deleted, [deadEp.metadata.uid]);
    writes.check(['delete ciliumendpoints [uid+rv]', 'create events'], 'the deleting run');
    assert.not.ok(await exists(kube, CILIUM.endpoints, deadEp), 'the orphan endpoint is deleted');
    assert.ok(await exists(kube, CILIUM.endpoints, liveEp), 'the live endpoint stays');
    const events = (await kube.listAll(EVENTS, { namespace: ns })).items;
    assert.ok(
      events.some(
        (e) =>
          e.reason === 'TwopassRuleReclaimed' &&
          (e.involvedObject as { uid?: string }).uid === deadEp.metadata.uid,
      ),
      'an Event says what was deleted',
    );
  });

  it('cilium-endpoints: no tombstone, no deletion; the tombstone holds the endpoint as it was; restore creates it again (without its uid), refused while one of its name exists', async (t, kube) => {
    const ns = await t.namespace();
    const dead = await pod(kube, ns, 'dead-0');
    const deadEp = await createEndpoint(kube, dead, 1003);
    await gone(kube, dead);
    const fn = fnOf('cilium-endpoints');
    const r = runner(fn, t.options, [ns], Date.now());
    const tombPath = join(r.dir, 'cilium-endpoints.tombstones.json.gz');
    mkdirSync(tombPath, { recursive: true });
    await r.run();
    r.now += 11 * MIN;
    const refused = await r.run();
    assert.equal(refused.deleted, [], 'no tombstone, no deletion');
    assert.is(refused.exitCode, EXIT.error);
    assert.ok(await exists(kube, CILIUM.endpoints, deadEp));
    rmSync(tombPath, { recursive: true });
    r.now += MIN;
    assert.equal((await r.run()).deleted, [deadEp.metadata.uid]);
    const [tomb] = await new FileTombstones(r.dir, () => r.now).list('cilium-endpoints');
    assert.is(
      (tomb!.object as KubeObject).metadata.uid,
      deadEp.metadata.uid,
      'the endpoint as it was re-read',
    );
    assert.equal((tomb!.object as KubeObject).metadata.labels, deadEp.metadata.labels);
    const ctx = (apply: boolean) => ({
      now: r.now,
      signal: AbortSignal.timeout(30_000),
      settings: parsed(fn, { namespaces: [ns] }),
      note: () => {},
      apply,
    });
    assert.is((await fn.restore(kube, kube, tomb!, ctx(false))).outcome, 'ready');
    const back = await fn.restore(kube, kube, tomb!, ctx(true));
    assert.is(back.outcome, 'restored', JSON.stringify(back));
    const again = await kube.get(CILIUM.endpoints, ns, deadEp.metadata.name);
    assert.ok(again && again.metadata.uid !== deadEp.metadata.uid, 'created anew');
    assert.equal(again!.metadata.labels, deadEp.metadata.labels);
    const twice = await fn.restore(kube, kube, tomb!, ctx(false));
    assert.is(twice.outcome, 'refused');
    assert.match(JSON.stringify(twice), /exists now/);
  });

  it('cilium-endpoints: a Pod re-created under the same name keeps its endpoint (judged by UID, never by name)', async (t, kube) => {
    const ns = await t.namespace();
    const old = await pod(kube, ns, 'web-0');
    const ep = await createEndpoint(kube, old, 2001);
    const r = runner(fnOf('cilium-endpoints'), t.options, [ns], Date.now());
    assert.equal((await r.run()).deleted, []);
    // the StatefulSet pod is re-created; the agent has not yet caught up: the endpoint names the old UID
    await gone(kube, old);
    const fresh = await pod(kube, ns, 'web-0');
    r.now += MIN;
    assert.equal((await r.run()).deleted, [], 'first unused observation');
    assert.is(r.events('candidate.new').length, 1);
    // the agent adopts the endpoint for the new pod before the grace ends
    await adoptEndpoint(kube, (await kube.get(CILIUM.endpoints, ns, 'web-0'))!, fresh);
    r.now += 11 * MIN;
    const after = await r.run();
    assert.equal(after.deleted, [], 'the adopted endpoint is in use');
    assert.ok(r.events('candidate.rescued').length >= 1, 'the candidate is rescued');
    assert.ok(
      (await kube.get(CILIUM.endpoints, ns, 'web-0'))?.metadata.uid === ep.metadata.uid,
      'the endpoint of the re-created pod survives',
    );
  });

  it('cilium-endpoints: an endpoint changed between the decision and the delete is re-checked and kept', async (t, kube) => {
    const ns = await t.namespace();
    const old = await pod(kube, ns, 'db-0');
    await createEndpoint(kube, old, 2002);
    await gone(kube, old);
    const fn = fnOf('cilium-endpoints');
    const r = runner(fn, t.options, [ns], Date.now());
    await r.run();
    r.now += 11 * MIN;
    // the decision is taken on a snapshot; the fresh pod appears after it, before the delete
    const reader = t.client();
    const snap = await fn.observe(reader, {
      now: r.now,
      signal: new AbortController().signal,
      settings: parsed(fn, { namespaces: [ns] }),
      note: () => {},
    });
    const target = snap.targets.find((x) => x.name === `${ns}/db-0`)!;
    assert.ok(target && !snap.used.includes(target.key), 'unused in the snapshot');
    const fresh = await pod(kube, ns, 'db-0');
    await adoptEndpoint(kube, (await kube.get(CILIUM.endpoints, ns, 'db-0'))!, fresh);
    const ctx = {
      now: r.now,
      signal: new AbortController().signal,
      settings: parsed(fn, { namespaces: [ns] }),
      note: () => {},
    };
    const re = await fn.recheck(reader, target, ctx);
    assert.equal(re, { ok: false, reason: 'CiliumEndpoint changed since the snapshot' });
    // and the delete itself carries the snapshot's resourceVersion: 409, nothing deleted
    const out = await fn.remove(reader, target, ctx);
    assert.is(out.outcome, 'skipped');
    assert.ok(await kube.get(CILIUM.endpoints, ns, 'db-0'), 'the endpoint is still there');
    await reader.close();
  });

  it('cilium-endpoints: an endpoint without an owner reference is indeterminate, never deleted', async (t, kube) => {
    const ns = await t.namespace();
    const p = await pod(kube, ns, 'orphan-0');
    const ep = await createEndpoint(kube, p, 2003, 'none');
    const r = runner(fnOf('cilium-endpoints'), t.options, [ns], Date.now());
    await r.run();
    r.now += 30 * MIN;
    assert.equal((await r.run()).deleted, []);
    const ind = r.events('target.indeterminate').filter((e) => e.name === `${ns}/orphan-0`);
    assert.ok(
      ind.length >= 1 && String(ind[0]!.reason).includes('no owner reference to a Pod'),
      JSON.stringify(ind),
    );
    assert.ok(await exists(kube, CILIUM.endpoints, ep));
  });

  it('a rule whose expression reads a missing field: its targets are indeterminate with the error', async (t, kube) => {
    const ns = await t.namespace();
    const p = await pod(kube, ns, 'gone-0');
    const ep = await createEndpoint(kube, p, 2004);
    await gone(kube, p);
    const fn = variant('cilium-endpoints', {
      indeterminate: undefined,
      inUse:
        'object.metadata.ownerReferences.exists(r, r.uid in evidence.pods) || object.spec.nodeName == ""',
    });
    const r = runner(fn, t.options, [ns], Date.now());
    await r.run();
    r.now += 30 * MIN;
    assert.equal((await r.run()).deleted, []);
    const ind = r.events('target.indeterminate').find((e) => e.name === `${ns}/gone-0`);
    assert.ok(ind && /inUse: .*(No such key|spec)/.test(String(ind.reason)), JSON.stringify(ind));
    assert.ok(await exists(kube, CILIUM.endpoints, ep));
  });

  it('a target kind not served once is doubt (exit 3, nothing saved), and the evidence baseline survives it: the next pods list, complete-looking but missing 15 live pods, is refused, and none of their endpoints is ever deleted', async (t, kube) => {
    const ns = await t.namespace();
    const eps: KubeObject[] = [];
    for (let i = 0; i < 15; i++)
      eps.push(await createEndpoint(kube, await pod(kube, ns, `live-${i}`), 3000 + i));
    const r = runner(fnOf('cilium-endpoints'), t.options, [ns], Date.now(), { maxEvidenceDropPercent: 0 });
    assert.is((await r.run()).exitCode, EXIT.ok, 'the baseline: every pod listed');
    // the CRD is being re-installed: its kind answers 404 once
    let vanish = true;
    r.intercept = (k) =>
      intercept(k, (c, go) =>
        c.verb === 'serves' && c.resource === 'ciliumendpoints' && vanish
          ? (Promise.resolve(false) as ReturnType<typeof go>)
          : go(),
      );
    r.now += 5 * MIN;
    const notServed = await r.run();
    assert.is(notServed.exitCode, EXIT.incomplete, 'a target not served is doubt');
    assert.match(String(r.events('run.aborted').at(-1)?.reason), /is not served by the API server/);
    vanish = false;
    // then a pods list that looks complete but lacks this namespace's 15 pods
    r.intercept = (k) =>
      intercept(k, (c, go) => {
        if (c.verb !== 'list' || c.resource !== 'pods') return go();
        return go().then((l) => {
          const list = l as unknown as { items: KubeObject[] };
          return {
            ...list,
            items: list.items.filter((p) => p.metadata.namespace !== ns),
          } as unknown as Awaited<ReturnType<typeof go>>;
        });
      });
    for (const step of [5, 15, 15]) {
      r.now += step * MIN;
      const broken = await r.run();
      assert.is(broken.exitCode, EXIT.refused, 'the baseline was kept: the drop is refused');
      assert.equal(broken.deleted, []);
    }
    for (const ep of eps) assert.ok(await exists(kube, CILIUM.endpoints, ep), 'no live endpoint deleted');
  });

  it('a rule whose evidence is not served: nothing is decided', async (t, kube) => {
    const ns = await t.namespace();
    const p = await pod(kube, ns, 'gone-1');
    const ep = await createEndpoint(kube, p, 2005);
    await gone(kube, p);
    const fn = variant('cilium-endpoints', {
      evidence: {
        pods: {
          group: 'example.invalid',
          version: 'v1',
          resource: 'pods',
          kind: 'Pod',
          namespaced: true,
          key: 'object.metadata.uid',
        },
      },
    });
    const r = runner(fn, t.options, [ns], Date.now());
    await r.run();
    r.now += 30 * MIN;
    const second = await r.run();
    assert.equal(second.deleted, []);
    assert.equal(second.confirmed, []);
    assert.ok(await exists(kube, CILIUM.endpoints, ep));
  });

  it('cilium-identities: only the identity no endpoint and no slice references goes', async (t, kube) => {
    const ns = await t.namespace();
    const [a, b, c] = [identityId(), identityId(), identityId()];
    const p = await pod(kube, ns, 'app-0');
    await createEndpoint(kube, p, a);
    await createSlice(kube, `ces-${ns}`, ns, [b]);
    const ids = [
      await createIdentity(kube, a, ns),
      await createIdentity(kube, b, ns),
      await createIdentity(kube, c, ns),
    ];
    const r = runner(fnOf('cilium-identities'), t.options, [ns], Date.now());
    const mine = new Set(ids.map((i) => i.metadata.uid));
    const first = await r.run();
    assert.is(first.exitCode, EXIT.ok);
    assert.ok(
      r.events('candidate.new').some((e) => e.name === String(c)),
      'the unreferenced identity is a candidate',
    );
    r.now += 16 * MIN;
    const second = await r.run();
    assert.equal(
      second.deleted.filter((k) => mine.has(k)),
      [ids[2]!.metadata.uid],
    );
    assert.ok(await exists(kube, CILIUM.identities, ids[0]!), 'referenced by an endpoint');
    assert.ok(await exists(kube, CILIUM.identities, ids[1]!), 'referenced by a slice');
    assert.not.ok(await exists(kube, CILIUM.identities, ids[2]!));
  });

  it("a rule re-checks its later deletions on evidence re-read once older than evidenceMaxAge (30 s), not on the run's first read", async (t, kube) => {
    const ns = await t.namespace();
    const ids = [identityId(), identityId()];
    const made = [await createIdentity(kube, ids[0]!, ns), await createIdentity(kube, ids[1]!, ns)];
    const mine = new Set(made.map((i) => i.metadata.name));
    // One deletion at a time, so that the second re-check comes after the first delete.
    const fn = { ...fnOf('cilium-identities'), maxConcurrency: 1 };
    const r = runner(fn, t.options, [ns], Date.now());
    await r.run();
    r.now += 16 * MIN;
    const p = await pod(kube, ns, 'late-0');
    let taken: string | undefined;
    r.intercept = (k) =>
      intercept(k, async (call, next) => {
        const out = await next();
        // After the first of the two deletes, 40 s pass and an endpoint takes the other identity.
        if (
          call.verb === 'delete' &&
          call.resource === 'ciliumidentities' &&
          !taken &&
          mine.has(call.name!)
        ) {
          taken = [...mine].find((n) => n !== call.name)!;
          r.now += 40_000;
          await createEndpoint(kube, p, Number(taken));
        }
        return out;
      });
    const res = await r.run();
    delete r.intercept;
    assert.ok(taken, 'one of the two identities was deleted first');
    const takenUid = made.find((m) => m.metadata.name === taken)!.metadata.uid;
    assert.not.ok(res.deleted.includes(takenUid), 'the identity taken meanwhile is not deleted');
    assert.ok(await exists(kube, CILIUM.identities, made.find((m) => m.metadata.name === taken)!));
    assert.ok(
      r.events('delete.skipped').some((e) => e.key === takenUid && /in use/.test(String(e.reason))),
      'its re-check read the evidence again and found it in use',
    );
    assert.is(res.deleted.filter((k) => made.some((m) => m.metadata.uid === k)).length, 1);
  });

  it('danm-eps: the DanmEp of a gone Pod goes; the one of a live Pod stays', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', []);
    const live = await pod(kube, ns, 'live-0');
    const dead = await pod(kube, ns, 'dead-0');
    const liveEp = await createDanmEp(kube, live, 'test-net1', '10.10.10.5/24');
    const deadEp = await createDanmEp(kube, dead, 'test-net1', '10.10.10.6/24');
    await gone(kube, dead);
    const r = runner(fnOf('danm-eps'), t.options, [ns], Date.now());
    await r.run();
    r.now += 6 * MIN;
    const second = await r.run();
    assert.equal(second.deleted, [deadEp.metadata.uid]);
    assert.ok(await kube.get(R.danmeps, ns, liveEp.metadata.name));
    assert.not.ok(await kube.get(R.danmeps, ns, deadEp.metadata.name));
  });

  run();
}
