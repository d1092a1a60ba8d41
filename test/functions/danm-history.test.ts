/**
 * A leaked bit's history that the server no longer keeps (decision 0016): the real API
 * server's watch cache rolls over on a busy resource and answers 410 Expired; the fake's
 * history does the same past its capacity. Then nothing is carried over: the bit starts its
 * grace again, and the run says why.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { allocated, createNetwork, R, setBits } from '../../shared/sandbox/scenarios/danm.ts';
import { danmRunner } from '../helpers/danm.ts';
import { fakeTarget, type KubeTarget } from '../helpers/kube-target.ts';

/** A fake API server with one network whose .70 is leaked, its first observation made. */
async function leakedBitWorld(
  body: (w: {
    t: KubeTarget;
    kube: KubeHttpClient;
    ns: string;
    r: ReturnType<typeof danmRunner>;
  }) => Promise<void>,
) {
  const t = await fakeTarget();
  const kube = t.client();
  try {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.70']);
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    await body({ t, kube, ns, r });
  } finally {
    await kube.close();
    await t.close();
  }
}

test('a history the server no longer keeps carries nothing over: the leaked bit starts again, and the run says why', () =>
  leakedBitWorld(async ({ t, kube, ns, r }) => {
    t.fake!.store.history.capacity = 3;
    const churn = async () => {
      for (let i = 0; i < 3; i++) {
        await setBits(kube, ns, 'test-net1', ['10.10.10.100'], true);
        await setBits(kube, ns, 'test-net1', ['10.10.10.100'], false);
      }
    };
    await churn();
    r.now += 6 * MIN;
    let m = r.mark();
    assert.equal((await r.run()).deleted, []);
    const said = r.events('bits.history', m);
    assert.is(said.length, 1, JSON.stringify(said));
    assert.match(String(said[0]!.reason), /no longer has that history .*410.*start their grace again/);
    assert.ok(
      r.events('candidate.reset', m).some((e) => String(e.name).endsWith('10.10.10.70')),
      'the bit starts again',
    );
    // with the history kept again, the grace runs from that reset: 10 minutes later it goes
    t.fake!.store.history.capacity = 1000;
    await churn();
    r.now += 6 * MIN;
    m = r.mark();
    assert.equal((await r.run()).deleted, [], '6 min after the reset');
    assert.is(r.events('bits.history', m).length, 0);
    await churn();
    r.now += 5 * MIN;
    assert.is((await r.run()).deleted.length, 1);
    assert.not.ok(allocated((await kube.get(R.DanmNet, ns, 'test-net1'))!).includes('10.10.10.70'));
  }));

test('a history the identity may not read (no watch verb: 403) carries nothing over, and the run goes on', () =>
  leakedBitWorld(async ({ t, kube, ns, r }) => {
    t.fake!.faults.add({ method: 'GET', path: /watch=1/, status: 403 });
    for (const step of [6, 5]) {
      await setBits(kube, ns, 'test-net1', ['10.10.10.100'], true);
      await setBits(kube, ns, 'test-net1', ['10.10.10.100'], false);
      r.now += step * MIN;
      const m = r.mark();
      const res = await r.run();
      assert.is(res.exitCode, 0, 'the run goes on');
      assert.equal(res.deleted, []);
      const said = r.events('bits.history', m);
      assert.is(said.length, 1, JSON.stringify(said));
      assert.match(String(said[0]!.reason), /could not be read: .*403|Forbidden/);
      assert.match(String(said[0]!.reason), /may not watch danmnets: grant it the watch verb/);
      assert.is(said[0]!.level, 'warn', 'a refusal is a setting to fix: a warning');
      assert.ok(r.events('candidate.reset', m).some((e) => String(e.name).endsWith('10.10.10.70')));
    }
    assert.ok(allocated((await kube.get(R.DanmNet, ns, 'test-net1'))!).includes('10.10.10.70'));
  }));

test.run();
