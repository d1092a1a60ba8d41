/**
 * The report-only pack cinder-csi-volumes: Cinder volumes (the fake's Cinder, held to the
 * documented API by test/openstack/cinder.test.ts) judged against PersistentVolumes, on the
 * fake API server and on the real kube-apiserver. A volume no PersistentVolume names is
 * reported after the grace and never deleted, even with --apply; another cluster's volume
 * is never judged; a volume that changed between the observations starts its grace again.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { ResourceRef } from '../../shared/kube/resources.ts';
import { cloudRuleFunction } from '../../shared/rules/cloud-function.ts';
import type { CloudRule } from '../../shared/rules/cloud-rule.ts';
import { loadAnyRuleFile } from '../../shared/rules/registry.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { fakeTarget, type KubeTarget, realTarget } from '../helpers/kube-target.ts';
import { runner } from '../helpers/runner.ts';
import { targetSuite } from '../helpers/target-suite.ts';

const PACK = new URL('../../functions/rules/cinder-csi-volumes/rule.yaml', import.meta.url).pathname;
const CLUSTER = 'prod-1';
const PVS: ResourceRef = {
  group: '',
  version: 'v1',
  plural: 'persistentvolumes',
  kind: 'PersistentVolume',
  namespaced: false,
};
const HOUR = 60 * MIN;

type World = { os: FakeOpenStack; env: Record<string, string> };

for (const [label, getTarget] of [
  ['fake API server + fake Cinder', () => fakeTarget()],
  ['real kube-apiserver + fake Cinder', realTarget],
] as const) {
  const suite = targetSuite<KubeTarget, World>(`rule cinder-csi-volumes (${label})`, getTarget, {
    setup: async () => {
      const os = new FakeOpenStack();
      await os.start();
      const dir = mkdtempSync(join(tmpdir(), 'twopass-cinder-pack-'));
      writeFileSync(join(dir, 'clouds.yaml'), os.cloudsYaml('appcred', 'fake'));
      return { os, env: { OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') } };
    },
    teardown: (w) => w.os.stop(),
  });
  const rule = loadAnyRuleFile(PACK)[0] as CloudRule;
  const mk = (t: KubeTarget, w: World) =>
    runner(
      cloudRuleFunction(rule),
      t.options,
      [],
      Date.now() + MIN,
      { enabled: true, maxEvidenceDropPercent: 100, settings: { projectId: 'project-a', cluster: CLUSTER } },
      w.env,
    );
  const volume = (w: World, name: string, extra: Record<string, unknown> = {}) =>
    w.os.addVolume({
      name,
      metadata: { 'cinder.csi.openstack.org/cluster': CLUSTER },
      ...extra,
    }).id;
  const pv = (name: string, handle: string) => ({
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name },
    spec: {
      capacity: { storage: '1Gi' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Retain',
      csi: { driver: 'cinder.csi.openstack.org', volumeHandle: handle },
    },
  });

  suite.it(
    'a volume no PersistentVolume names is reported after the grace and never deleted, even with --apply; a named one is in use; an attached one is undecided; another cluster’s is never judged',
    async (_t, kube, w) => {
      const t = _t;
      const tag = Math.random().toString(36).slice(2, 8);
      const live = volume(w, `pvc-live-${tag}`);
      const retained = volume(w, `pvc-retained-${tag}`);
      const attached = volume(w, `pvc-attached-${tag}`, {
        status: 'in-use',
        attachments: [{ server_id: 'node-1', attachment_id: 'a-1' }],
      });
      const foreign = volume(w, `pvc-other-${tag}`, {
        metadata: { 'cinder.csi.openstack.org/cluster': 'prod-2' },
      });
      await kube.create(PVS, pv(`pvc-live-${tag}`, live));
      const r = mk(t, w);
      try {
        await r.run(true);
        r.now += 7 * HOUR;
        const res = await r.run(true);
        assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('run.aborted')));
        assert.equal(res.deleted, []);
        assert.is(res.dryRun, true, 'report-only: a dry run whatever was asked');
        assert.ok(r.events('run.report-only').length > 0);
        const confirmed = r.events('candidate.confirmed').map((e) => e.key);
        assert.ok(confirmed.includes(retained), 'the retained volume is reported');
        assert.not.ok(confirmed.includes(live), 'its PersistentVolume names it');
        assert.ok(
          r
            .events('target.indeterminate')
            .some((e) => e.key === attached && /attached to server node-1/.test(String(e.reason))),
        );
        assert.not.ok(
          r.lines.some((l) => l.key === foreign),
          "another cluster's volume is never judged",
        );
        for (const id of [live, retained, attached, foreign])
          assert.ok(w.os.volumes.has(id), `${id} is still there`);
        assert.not.ok(
          w.os.requests.some((q) => q.method !== 'GET' && q.path.includes('/volume/')),
          'no request but GET ever reached Cinder',
        );
      } finally {
        await kube.delete(PVS, undefined, `pvc-live-${tag}`).catch(() => {});
      }
    },
  );

  suite.it(
    'a volume that changed between the observations (its status or updated_at) starts its grace again',
    async (t, _kube, w) => {
      const id = volume(w, `pvc-moving-${Math.random().toString(36).slice(2, 8)}`);
      const r = mk(t, w);
      await r.run();
      r.now += 7 * HOUR;
      const v = w.os.volumes.get(id)!;
      v.updated_at = new Date(r.now).toISOString();
      await r.run();
      assert.not.ok(
        r.events('candidate.confirmed').some((e) => e.key === id),
        'changed: not confirmed',
      );
      r.now += 7 * HOUR;
      await r.run();
      assert.ok(
        r.events('candidate.confirmed').some((e) => e.key === id),
        'unchanged a grace apart: reported',
      );
    },
  );

  suite.run();
}
