/** lbaas-ports end to end: Services in Kubernetes (real or fake), ports and FIPs in the fake Neutron. */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { stringify } from 'yaml';
import { lbaasPorts, MANAGED_ANNOTATION } from '../../functions/lbaas-ports/index.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { DEPLOYMENTS, EVENTS, SERVICES } from '../../shared/kube/resources.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { controllerPort, createService, setIngress } from '../../shared/sandbox/scenarios/lbaas.ts';
import { StandInController } from '../../shared/sandbox/scenarios/lbaas-controller.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import { cliFiles, twopassAsync } from '../helpers/cli.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { beforeRecheck, changedBeforeDelete, neutronFor } from '../helpers/lbaas.ts';
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
    fn: typeof lbaasPorts = lbaasPorts,
  ): Runner =>
    runner(
      fn,
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
      { eventNamespace: ns },
    );
  const warnings = async (c: Ctx, ns: string, reason: string) =>
    (await c.kube.listAll(EVENTS, { namespace: ns })).items.filter(
      (e) => (e as { reason?: string }).reason === reason,
    ) as unknown as { message: string; type: string }[];
  const deletes = (c: Ctx) => c.os.requests.filter((q) => q.method === 'DELETE');

  it('the controller running: a confirmed port is held, not deleted, said in one line, the run log, a Warning Event; the grace keeps counting, and once it is scaled to 0 the port goes at the next run', async (c) => {
    const ns = await c.t.namespace();
    const orphan = controllerPort(c.os, {});
    const r = mk(c, ns);
    assert.equal((await r.run()).deleted, []);
    // It starts and loads every tagged port as free: the orphan is in its memory now.
    await c.ctl.start();
    assert.ok(c.ctl.free().includes(orphan.port.id));
    r.now += 31 * MIN;
    const held = await r.run();
    assert.is(held.outcome, 'held');
    assert.is(held.exitCode, EXIT.ok, 'the normal state of a cluster: not a failed Job');
    assert.equal(held.deleted, []);
    assert.equal(held.held, [orphan.port.id]);
    assert.equal(deletes(c), [], 'no DELETE reached Neutron');
    assert.match(String(r.events('run.held')[0]?.reason), /hands out free ports from memory: scale it to 0/);
    assert.match(String(r.events('controller.running')[0]?.reason), /wants 1 replica/);
    const ev = await warnings(c, ns, 'TwopassDeletionsHeld');
    assert.ok(ev.length > 0 && ev[0]!.type === 'Warning', 'a Warning Event');
    assert.match(ev[0]!.message, /held, nothing was deleted/);
    // Meanwhile it gives the port to a new Service from memory: nothing anyone can read shows it.
    assert.is(c.ctl.chooseInMemory(`${ns}/new`), orphan.port.id);
    r.now += 10 * MIN;
    assert.is((await r.run()).outcome, 'held');
    assert.ok(c.os.ports.has(orphan.port.id));
    // The operator's procedure: scale it to 0, run, scale it back.
    await c.ctl.stop();
    r.now += MIN;
    const res = await r.run();
    assert.is(res.outcome, 'ok');
    assert.equal(
      res.deleted,
      [orphan.fip!.id, orphan.port.id],
      'reclaimed at once: the grace had kept counting',
    );
    assert.match(String(r.events('controller.stopped').at(-1)?.reason), /scaled to 0 with no pod/);
  });

  it('a controller that starts between the re-check and the DELETE: the port is held (a fresh read of it right before each DELETE)', async (c) => {
    const ns = await c.t.namespace();
    const orphan = controllerPort(c.os, {});
    let started = false;
    const fn = beforeRecheck(lbaasPorts, async () => {
      if (started) return;
      started = true;
      await c.ctl.start();
    });
    const r = mk(c, ns, {}, {}, fn);
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run();
    assert.ok(started, 'the controller started during the act phase');
    assert.is(res.outcome, 'held');
    assert.is(res.exitCode, EXIT.ok, 'nothing was deleted before it');
    assert.equal(res.held, [orphan.port.id]);
    assert.equal(deletes(c), [], 'no DELETE reached Neutron');
    assert.ok(r.events('delete.held').some((e) => e.key === orphan.port.id));
    await c.ctl.stop();
    r.now += MIN;
    assert.equal((await r.run()).deleted, [orphan.fip!.id, orphan.port.id]);
  });

  it('a controller that starts while a DELETE is in flight: the deletes stop, the deletion is told unproven, a Warning Event says to restart it', async (c) => {
    const ns = await c.t.namespace();
    const ports = [controllerPort(c.os, {}), controllerPort(c.os, {}), controllerPort(c.os, {})];
    // It starts just as the first DELETE is sent: it still lists that port, and holds it as free.
    const fn = changedBeforeDelete(lbaasPorts, async () => {
      if (!c.ctl.running) await c.ctl.start();
    });
    const r = mk(c, ns, { concurrency: 1 }, { maxDeletions: 100 }, fn);
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run();
    assert.is(res.outcome, 'held');
    assert.is(res.exitCode, EXIT.error, 'something was deleted under it: the operator must act');
    const gone = ports.filter((p) => !c.os.ports.has(p.port.id));
    assert.is(gone.length, 1, 'one DELETE went; the rest were not attempted');
    assert.is(res.held.length, 2);
    for (const p of ports)
      if (!gone.includes(p)) assert.ok(c.os.ports.has(p.port.id) && c.os.fips.has(p.fip!.id));
    const line = r.events('resource.deleted').find((e) => e.key === gone[0]!.port.id)!;
    assert.is(line.unproven, true, 'Neutron answered 204, which proves the port gone, not who removed it');
    assert.match(String(line.detail), /controller was running/);
    assert.equal(res.unprovenByKind, { Port: 1 });
    assert.match(
      String(r.events('controller.started')[0]?.reason),
      /restart it so that it reloads its ports/,
    );
    const ev = await warnings(c, ns, 'TwopassDeletionsHeld');
    assert.ok(
      ev.some((e) => /restart it/.test(e.message)),
      'the Warning Event says to restart it',
    );
    // Why: the deleted port is free in its memory, and the next Service given it fails.
    assert.ok(c.ctl.free().includes(gone[0]!.port.id));
    await createService(c.kube, ns, 'next');
    const placed = await c.ctl.place(ns, 'next');
    assert.equal(c.ctl.failures, [{ service: `${ns}/next`, port: gone[0]!.port.id }]);
    assert.ok(placed && placed !== gone[0]!.port.id, 'moved to another port');
    await c.kube.delete(SERVICES, ns, 'next');
  });

  it('the controller cannot be found or read: doubt, exit 3, nothing deleted; `controller: none` (decommissioned) reclaims, and Services waiting for a port block nothing', async (c) => {
    const ns = await c.t.namespace();
    const orphan = controllerPort(c.os, {});
    const missing = mk(c, ns, { controller: { namespace: c.ctl.setting.namespace, deployment: 'no-such' } });
    const a = await missing.run();
    assert.is(a.exitCode, EXIT.incomplete);
    assert.match(String(missing.events('run.aborted')[0]?.reason), /not found.*set `controller: none`/);
    const none = mk(c, ns, {
      controller: { namespace: c.ctl.setting.namespace, selector: 'app=nothing-here' },
    });
    assert.is(
      (await none.run()).exitCode,
      EXIT.incomplete,
      'a selector that finds no Deployment is doubt too',
    );
    if (c.t.fake) {
      c.t.fake.faults.add({ method: 'GET', path: '/apis/apps/v1/namespaces/', status: 403 });
      const forbidden = await mk(c, ns).run();
      c.t.fake.faults.clear();
      assert.is(forbidden.exitCode, EXIT.incomplete);
    }
    await createService(c.kube, ns, 'waiting', { managed: false });
    const d = mk(c, ns, { controller: 'none' });
    await d.run();
    d.now += 31 * MIN;
    const res = await d.run();
    assert.equal(res.deleted, [orphan.fip!.id, orphan.port.id]);
    assert.equal(deletes(c).length, 2);
    await c.kube.delete(SERVICES, ns, 'waiting');
  });

  it('a selector finds the controller too; its pod alone (Deployment at 0, pod not gone yet) is running', async (c) => {
    const ns = await c.t.namespace();
    const orphan = controllerPort(c.os, {});
    const sel = mk(c, ns, {
      controller: { namespace: c.ctl.setting.namespace, selector: 'app!=nothing' },
    });
    await sel.run();
    await c.ctl.start();
    await c.kube.mergePatch(DEPLOYMENTS, c.ctl.setting.namespace, c.ctl.name, { spec: { replicas: 0 } });
    sel.now += 31 * MIN;
    const res = await sel.run();
    assert.is(res.outcome, 'held');
    assert.match(
      String(sel.events('controller.running')[0]?.reason),
      /scaled to 0 but its pod .* still exists/,
    );
    await c.ctl.stop();
    sel.now += MIN;
    assert.equal((await sel.run()).deleted, [orphan.fip!.id, orphan.port.id]);
  });

  it('being placed follows the controller: a LoadBalancer Service without the managed annotation blocks every port; managed: "false" does not', async (c) => {
    const ns = await c.t.namespace();
    const free = controllerPort(c.os, {});
    await createService(c.kube, ns, 'unannotated', { managed: false });
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, []);
    assert.ok(
      r.events('target.indeterminate').some((e) => String(e.reason).includes(`Service ${ns}/unannotated`)),
    );
    await c.kube.mergePatch(SERVICES, ns, 'unannotated', {
      metadata: { annotations: { [MANAGED_ANNOTATION]: 'false' } },
    });
    await r.run();
    r.now += 31 * MIN;
    assert.equal(
      (await r.run()).deleted,
      [free.fip!.id, free.port.id],
      'a Service the controller never takes',
    );
    await c.kube.delete(SERVICES, ns, 'unannotated');
  });

  it("restore gives back the controller's port: no name, no owner, no port security, no groups, the same fixed IP, tags, description, its floating IP's address; a member's credentials are refused at once, nothing created", async (c) => {
    const ns = await c.t.namespace();
    const orphan = controllerPort(c.os, {});
    const r = mk(c, ns);
    await r.run();
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, [orphan.fip!.id, orphan.port.id]);
    const dir = mkdtempSync(join(tmpdir(), 'twopass-lbaas-restore-'));
    const files = cliFiles(
      dir,
      c.t.kubeconfig(),
      stringify({
        functions: {
          'lbaas-ports': { enabled: true, settings: { projectId: 'project-a', controller: c.ctl.setting } },
        },
      }),
    );
    writeFileSync(join(dir, 'admin.yaml'), c.os.cloudsYaml('admin'));
    const args = [
      'restore',
      'lbaas-ports',
      ...files,
      '--state',
      `file:${r.dir}`,
      '--output',
      'json',
      '--key',
      orphan.port.id,
      '--apply',
    ];
    const posts = () => c.os.requests.filter((q) => q.method === 'POST' && !q.path.includes('/auth/')).length;
    const member = await twopassAsync(args, c.env);
    assert.is(member.code, 1, member.out + member.err);
    assert.match(member.out, /needs an admin's credentials.*nothing was created/);
    assert.is(posts(), 0, 'refused before anything was created');
    const admin = await twopassAsync(args, {
      OS_CLOUD: 'fake',
      OS_CLIENT_CONFIG_FILE: join(dir, 'admin.yaml'),
    });
    assert.is(admin.code, 0, admin.out + admin.err);
    const done = admin.json().find((l) => l.event === 'restore.restored') as {
      ids: { port: string; floatingIp: string };
      detail: string;
    };
    assert.is(
      (done as unknown as { object: { port: { id: string } } }).object.port.id,
      orphan.port.id,
      "the JSON output holds the tombstone's object",
    );
    assert.match(done.detail, /the port's id is new.*adopts it only when it next starts/);
    const p = c.os.ports.get(done.ids.port)!;
    assert.is(p.name, '');
    assert.is(p.device_owner, '');
    assert.is(p.device_id, '');
    assert.is(p.port_security_enabled, false);
    assert.equal(p.security_groups, []);
    assert.equal(
      p.fixed_ips?.map((f) => f.ip_address),
      orphan.port.fixed_ips?.map((f) => f.ip_address),
    );
    assert.equal(p.tags, orphan.port.tags);
    assert.is(p.description, orphan.port.description);
    const f = c.os.fips.get(done.ids.floatingIp)!;
    assert.is(f.floating_ip_address, orphan.fip!.floating_ip_address);
    assert.is(f.port_id, done.ids.port);
  });

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
