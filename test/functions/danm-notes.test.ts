/**
 * What danm-endpoints says besides its decisions: nothing about namespaces outside its
 * `settings.namespaces`, and a warning when no network API is served while DanmEps are
 * (every DanmEp then stays undecided; a run must not look like a quiet success).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import { MINUTE } from '../../shared/contract/index.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { leakedEndpoint, R } from '../../shared/sandbox/scenarios/danm.ts';
import { intercept } from '../helpers/intercept.ts';
import { fakeTarget } from '../helpers/kube-target.ts';
import { captureLog } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';

test('notes stay inside settings.namespaces; no network API served is a warning, and nothing is deleted', async () => {
  const t = await fakeTarget();
  const kube = t.client();
  try {
    const mine = await t.namespace();
    const other = await t.namespace();
    const ep = await leakedEndpoint(kube, mine, '10.10.10.7');
    // another team's namespace: an unreadable network and a DanmEp without a PodUID
    await kube.create(R.DanmNet, {
      metadata: { name: 'bad-b64', namespace: other },
      spec: { Options: { cidr: '10.11.0.0/24', alloc: '!!!notbase64' } },
    });
    await kube.create(R.danmeps, {
      metadata: { name: 'no-pod', namespace: other },
      spec: {
        NetworkName: 'bad-b64',
        Pod: 'p',
        PodUID: '',
        Interface: { Name: 'eth0', Address: '10.11.0.5/24' },
      },
    });
    let now = Date.now() + MINUTE;
    const cfg = resolveConfig(
      {
        allowShortGrace: true,
        functions: {
          'danm-endpoints': {
            grace: 0,
            minAge: 0,
            maxDeletionPercent: 100,
            settings: { namespaces: [mine] },
          },
        },
      },
      'test',
      { state: `file:${mkdtempSync(join(tmpdir(), 'twopass-notes-'))}` },
    );
    const run = async (hide = false) => {
      const cap = captureLog(() => now);
      const r = await runFunction(
        danmEndpoints,
        cfg,
        {
          time: testTime(() => now),
          log: cap.log,
          kubeOptions: t.options,
          // DANM's network CRDs removed while DanmEps are still served
          ...(hide
            ? {
                intercept: (inner) =>
                  intercept(inner, (call, next) =>
                    call.verb === 'serves' && call.resource !== 'danmeps'
                      ? (Promise.resolve(false) as never)
                      : next(),
                  ),
              }
            : {}),
        },
        { apply: true },
      );
      now += MINUTE;
      return { r, lines: cap.lines };
    };
    const first = await run();
    assert.is(first.r.exitCode, EXIT.ok);
    const about = (lines: Record<string, unknown>[], ns: string) =>
      lines.filter((l) => String(l.name ?? '').startsWith(`${ns}/`)).map((l) => l.event);
    assert.equal(about(first.lines, other), [], 'nothing is said about a namespace out of scope');
    assert.ok(first.lines.some((l) => l.event === 'candidate.new' && l.key === ep.metadata.uid));

    const blind = await run(true);
    assert.is(blind.r.exitCode, EXIT.ok);
    const warning = blind.lines.find((l) => l.event === 'networks.not-served');
    assert.ok(warning, 'a warning when no network API is served');
    assert.is(warning.level, 'warn');
    assert.match(String(warning.reason), /serves none of DanmNet, TenantNetwork, ClusterNetwork/);
    assert.equal(blind.r.deleted, [], 'nothing deleted without the networks');
    assert.ok(await kube.get(R.danmeps, mine, ep.metadata.name), 'the DanmEp is still there');
  } finally {
    await kube.close();
    await t.close();
  }
});

test.run();
