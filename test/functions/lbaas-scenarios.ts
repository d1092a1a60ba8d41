/** lbaas-ports end to end: Services in Kubernetes (real or fake), ports and FIPs in the fake Neutron. */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { lbaasPorts } from '../../functions/lbaas-ports/index.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { SERVICES } from '../../shared/kube/resources.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { controllerPort, createService, setIngress } from '../../shared/sandbox/scenarios/lbaas.ts';
import { StandInController } from '../../shared/sandbox/scenarios/lbaas-controller.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { changedBeforeDelete, neutronFor } from '../helpers/lbaas.ts';
import { type Runner, runner } from '../helpers/runner.ts';
import { targetSuite } from '../helpers/target-suite.ts';

export function lbaasScenarios(label: string, getTarget: () => Promise<KubeTarget | undefined>): void {
  type Ctx = {
    t: KubeTarget;
    kube: KubeHttpClient;
    os: FakeOpenStack;
    env: Record<string, string>;
    /** The stand-in ch-k8s-lbaas controller: scaled to 0 with no pod when a test begins (the operator's procedure). */
    ctl: StandInController;
  };
  type X = {
    os: FakeOpenStack;
    env: Record<string, string>;
    kube: KubeHttpClient;
    ctlNs: string;
    ctl?: StandInController;
    close?: () => Promise<void>;
  };
  const suite = targetSuite<KubeTarget, X>(`lbaas-ports (${label})`, getTarget, {
    setup: async (t, kube) => ({ os: new FakeOpenStack(), env: {}, kube, ctlNs: await t.namespace() }),
    // A fresh fake Keystone + Neutron for each test, and the controller stopped.
    beforeEach: async (x) => {
      x.os = new FakeOpenStack();
      await x.os.start();
      const dir = mkdtempSync(join(tmpdir(), 'twopass-lbaas-'));
      writeFileSync(join(dir, 'clouds.yaml'), x.os.cloudsYaml('appcred'));
      x.env = { OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') };
      const { neutron, close } = neutronFor(x.env);
      x.close = close;
      x.ctl = new StandInController({ kube: x.kube, neutron, projectId: 'project-a', namespace: x.ctlNs });
      await x.ctl.stop();
    },
    afterEach: async (x) => {
      await x.close?.();
      await x.os.stop();
    },
  });
  const it = (name: string, fn: (c: Ctx) => Promise<void>) =>
    suite.it(name, (t, kube, x) => fn({ t, kube, os: x.os, env: x.env, ctl: x.ctl! }));
  const mk = (
    c: Ctx,
    ns: string,
    settings: Record<string, unknown> = {},
    extra: Record<string, unknown> = {},
  ): Runner =>
    runner(
      lbaasPorts,
      c.t.options,
      [ns],
      Date.now() + MIN,
      {
        enabled: true,
        maxEvidenceDropPercent: 100,
        ...extra,
        settings: { projectId: 'project-a', controller: c.ctl.setting, ...settings },
      },
      c.env,
    );

  it('the founding incident: the ingress-nginx port and FIP survive every run; a port whose Service is gone goes after 30 min, then its FIP', async (c) => {
    const { kube, os } = c;
    const ns = await c.t.namespace();
    const ingress = controllerPort(os, { name: 'ingress-nginx' });
    const old = controllerPort(os, { name: 'old-app' });
    await createService(kube, ns, 'ingress-nginx-controller', { portId: ingress.port.id });
    await setIngress(kube, ns, 'ingress-nginx-controller', ingress.fip!.floating_ip_address!);
    await createService(kube, ns, 'old-app', { portId: old.port.id });
    const r = mk(c, ns);
    // The controller restarts: its memory is empty, but the Service still names its port.
    assert.equal((await r.run()).deleted, []);
    await kube.delete(SERVICES, ns, 'old-app');
    for (const step of [10, 10, 10, 9]) {
      r.now += step * MIN;
      assert.equal((await r.run()).deleted, [], 'inside the 30 min grace window');
    }
    r.now += 2 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok);
    // The port and its floating IP: each its own counted outcome.
    assert.equal(res.deleted, [old.fip!.id, old.port.id]);
    assert.equal(res.deletedByKind, { FloatingIP: 1, Port: 1 });
    assert.ok(
      r.events('resource.deleted').some((e) => e.kind === 'FloatingIP' && e.partOf === old.port.id),
      'the FIP deletion is its own line, naming its port',
    );
    assert.ok(
      os.ports.has(ingress.port.id) && os.fips.has(ingress.fip!.id),
      'the in-use port and FIP survive',
    );
    assert.not.ok(os.ports.has(old.port.id) || os.fips.has(old.fip!.id));
    const deletes = os.requests.filter((q) => q.method === 'DELETE').map((q) => q.path.split('/')[3]);
    assert.equal(deletes, ['ports', 'floatingips'], 'the port under its precondition first, then its FIP');
    for (let i = 0; i < 3; i++) {
      r.now += 31 * MIN;
      assert.equal((await r.run()).deleted, []);
    }
    assert.ok(os.ports.has(ingress.port.id));
  });

  it('no tombstone, no deletion: a port whose tombstone cannot be written stays, with its floating IP; once it can, both go and the tombstone holds them as they were', async (c) => {
    const { kube, os } = c;
    const ns = await c.t.namespace();
    const old = controllerPort(os, { name: 'old-app' });
    await createService(kube, ns, 'old-app', { portId: old.port.id });
    const r = mk(c, ns);
    const tombPath = join(r.dir, 'lbaas-ports.tombstones.json.gz');
    mkdirSync(tombPath, { recursive: true });
    await r.run();
    await kube.delete(SERVICES, ns, 'old-app');
    r.now += MIN;
    await r.run();
    r.now += 31 * MIN;
    const refused = await r.run();
    assert.equal(refused.deleted, [], 'no tombstone, no deletion');
    assert.is(refused.exitCode, EXIT.error);
    assert.ok(os.ports.has(old.port.id) && os.fips.has(old.fip!.id), 'the port and its FIP stay');
    assert.not.ok(
      os.requests.some((q) => q.method === 'DELETE'),
      'no DELETE was sent',
    );
    rmSync(tombPath, { recursive: true });
    r.now += MIN;
    const res = await r.run();
    assert.equal(res.deleted, [old.fip!.id, old.port.id]);
    const [t] = await new FileTombstones(r.dir, () => r.now).list('lbaas-ports');
    const o = t!.object as { port: { id: string; revision_number: number }; floatingIp: { id: string } };
    assert.is(o.port.id, old.port.id);
    assert.is(o.floatingIp.id, old.fip!.id);
  });

  it('a Service matching only by its ingress IP keeps the port', async (c) => {
    const ns = await c.t.namespace();
    const p = controllerPort(c.os, {});
    await createService(c.kube, ns, 'by-ip', { managed: false });
    await setIngress(c.kube, ns, 'by-ip', p.port.fixed_ips![0]!.ip_address);
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, []);
    await c.kube.delete(SERVICES, ns, 'by-ip');
  });

  it("shared tag across clusters: only ports with this cluster's scope tag, in this project", async (c) => {
    const ns = await c.t.namespace();
    const mine = controllerPort(c.os, { extraTags: ['cluster-a'] });
    const theirs = controllerPort(c.os, { extraTags: ['cluster-b'] });
    const otherProject = controllerPort(c.os, { extraTags: ['cluster-a'], project: 'project-b' });
    const r = mk(c, ns, { scopeTag: 'cluster-a' });
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run();
    assert.equal(res.deleted, [mine.fip!.id, mine.port.id]);
    assert.ok(c.os.ports.has(theirs.port.id) && c.os.ports.has(otherProject.port.id));
    assert.not.ok(
      r.events('fip.unassociated').some((e) => String(e.name).includes(theirs.fip!.id)),
      "another cluster's FIP on its own managed port is outside the scope, not unassociated",
    );
  });

  it('crash between create and tag: the untagged port is reported, never deleted', async (c) => {
    const ns = await c.t.namespace();
    const untagged = controllerPort(c.os, { untagged: true });
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    await r.run();
    assert.ok(c.os.ports.has(untagged.port.id));
    assert.ok(r.events('port.untagged').some((e) => e.key === untagged.port.id));
  });

  it('a managed Service being placed makes every port indeterminate, naming the Service', async (c) => {
    const ns = await c.t.namespace();
    const free = controllerPort(c.os, {});
    await createService(c.kube, ns, 'placing');
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, []);
    assert.ok(c.os.ports.has(free.port.id));
    assert.ok(
      r.events('target.indeterminate').some((e) => String(e.reason).includes(`Service ${ns}/placing`)),
    );
    await c.kube.delete(SERVICES, ns, 'placing');
  });

  it('port re-attached between the observations: the revision changed, observation restarts', async (c) => {
    const ns = await c.t.namespace();
    const p = controllerPort(c.os, {});
    const r = mk(c, ns);
    await r.run();
    c.os.update(p.port, { device_id: 'amphora-2' });
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, []);
    assert.ok(r.events('candidate.reset').some((e) => e.reason === 'fingerprint changed'));
    r.now += 31 * MIN;
    assert.equal(
      (await r.run()).deleted,
      [p.fip!.id, p.port.id],
      'reclaimed (the port, then its FIP) a grace window after the change',
    );
  });

  it('412 on delete: skipped, not an error', async (c) => {
    const ns = await c.t.namespace();
    const p = controllerPort(c.os, { withFip: false });
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    c.os.faults.add({ method: 'DELETE', path: '/ports/', status: 412 });
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok);
    assert.equal(res.skipped, [p.port.id]);
    assert.ok(c.os.ports.has(p.port.id));
  });

  it('the Keystone token expires mid-run: re-authenticated once, the run completes', async (c) => {
    const ns = await c.t.namespace();
    const p = controllerPort(c.os, { withFip: false });
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    c.os.faults.add({ method: 'GET', path: /\/ports\/[^?]+$/, nth: 1, status: 401 });
    const res = await r.run();
    assert.equal(res.deleted, [p.port.id]);
    assert.ok(c.os.requests.filter((q) => q.path.endsWith('/auth/tokens')).length >= 3);
    const text = JSON.stringify(r.lines);
    assert.not.ok(
      text.includes('fake-app-secret') || text.includes('fake-token-'),
      'no secret or token in the logs',
    );
  });

  it('evidence lister broke: the Services list fails (exit 3) or empties (guard, exit 4); nothing deleted', async (c) => {
    const ns = await c.t.namespace();
    const used = controllerPort(c.os, {});
    await createService(c.kube, ns, 'app', { portId: used.port.id });
    const r = mk(c, ns, {}, { maxEvidenceDropPercent: 30 });
    await r.run();
    r.now += 31 * MIN;
    if (c.t.fake) {
      c.t.fake.faults.add({ method: 'GET', path: '/api/v1/services', status: 403 });
      assert.is((await r.run()).exitCode, EXIT.incomplete);
      c.t.fake.faults.clear();
    }
    const before = (await c.kube.listAll(SERVICES, {})).items;
    for (const s of before)
      if (s.metadata.namespace === ns) await c.kube.delete(SERVICES, ns, s.metadata.name);
    const res = await r.run();
    if ((1 / before.length) * 100 > 30) assert.is(res.exitCode, EXIT.refused);
    assert.ok(c.os.ports.has(used.port.id));
  });

  it('a missing projectId is a configuration error (exit 2)', async (c) => {
    const ns = await c.t.namespace();
    const r = runner(lbaasPorts, c.t.options, [ns], Date.now(), { enabled: true }, c.env);
    try {
      await r.run();
      assert.unreachable('ran without a project');
    } catch (err) {
      assert.match((err as Error).message, /settings\.projectId` is required/);
    }
  });

  it('the unit order: a port changed just before its DELETE is skipped (412) and keeps its FIP', async (c) => {
    const ns = await c.t.namespace();
    const unit = controllerPort(c.os, {});
    const fn = changedBeforeDelete(lbaasPorts, async (portId) => {
      c.os.update(c.os.ports.get(portId)!, { name: 'taken-by-new-service' });
      await createService(c.kube, ns, 'new-service', { portId });
    });
    const r = runner(
      fn,
      c.t.options,
      [ns],
      Date.now() + MIN,
      {
        enabled: true,
        maxEvidenceDropPercent: 100,
        settings: { projectId: 'project-a', controller: c.ctl.setting },
      },
      c.env,
    );
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok);
    assert.equal(res.deleted, []);
    assert.ok(c.os.ports.has(unit.port.id) && c.os.fips.has(unit.fip!.id), 'port and FIP stay');
    const deletes = c.os.requests.filter((q) => q.method === 'DELETE').map((q) => q.path.split('/')[3]);
    assert.equal(deletes, ['ports'], 'one DELETE, of the port; the FIP was never asked');
    await c.kube.delete(SERVICES, ns, 'new-service');
  });

  it('Neutron without revision-if-match: ports are indeterminate unless unconditionalDeletes accepts the risk', async (c) => {
    const ns = await c.t.namespace();
    c.os.extensions = c.os.extensions.filter((e) => e !== 'revision-if-match');
    const p = controllerPort(c.os, {});
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, []);
    assert.ok(c.os.ports.has(p.port.id));
    assert.ok(
      r.events('target.indeterminate').some((e) => String(e.reason).includes('revision-if-match')),
      'the reason names the missing extension',
    );
    assert.ok(r.events('neutron.no-if-match').length > 0);
    const risky = mk(c, ns, { unconditionalDeletes: true });
    risky.now = r.now;
    await risky.run();
    risky.now += 31 * MIN;
    const res = await risky.run();
    assert.equal(res.deleted, [p.fip!.id, p.port.id], 'opted in: deleted without If-Match');
    assert.not.ok(c.os.requests.some((q) => q.method === 'DELETE' && q.status === 400));
  });

  it('lbaas-ports deletes in parallel groups: each group re-checked on one fresh Services list', async (c) => {
    const ns = await c.t.namespace();
    const units = Array.from({ length: 10 }, () => controllerPort(c.os, {}));
    const r = mk(c, ns, { concurrency: 4 }, { maxDeletions: 100 });
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run();
    assert.is(res.deleted.length, 20, 'ten ports and their ten FIPs');
    assert.equal(res.deletedByKind, { FloatingIP: 10, Port: 10 });
    for (const u of units) assert.not.ok(c.os.ports.has(u.port.id) || c.os.fips.has(u.fip!.id));
    assert.is(r.events('act.summary').length, 1);
  });

  suite.run();
}
