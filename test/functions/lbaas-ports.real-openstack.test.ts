/**
 * lbaas-ports against a real Keystone + Neutron (Debian's Zed) and the real
 * kube-apiserver: the founding incident, a Service being placed, a port changed
 * between the observations, a keep tag. Worlds stay small: a port costs the real
 * Neutron about 0.35 s of CPU; scale stays on the fake.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { stringify } from 'yaml';
import { lbaasPorts, MANAGED_TAG } from '../../functions/lbaas-ports/index.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { SERVICES } from '../../shared/kube/resources.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { createService, setIngress } from '../../shared/sandbox/scenarios/lbaas.ts';
import { StandInController } from '../../shared/sandbox/scenarios/lbaas-controller.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import { cliFiles, twopassAsync } from '../helpers/cli.ts';
import { type KubeTarget, realTarget } from '../helpers/kube-target.ts';
import { beforeRecheck, changedBeforeDelete, neutronFor } from '../helpers/lbaas.ts';
import { runner } from '../helpers/runner.ts';
import { targetSuite } from '../helpers/target-suite.ts';
import { passwordToken, realOpenStack } from '../openstack/real-openstack.ts';
import { realWorld } from '../openstack/real-world.ts';

// Both real servers or nothing: the suite is reported as skipped without either.
const os = process.env.TWOPASS_NO_REAL_CLUSTER === '1' ? undefined : realOpenStack();
if (!os)
  console.log(
    '  !!! no real Keystone + Neutron and kube-apiserver: lbaas-ports on the real OpenStack is SKIPPED',
  );
const { neutron, controllerPort, exists } = realWorld(os);
type X = { env: Record<string, string>; ctl: StandInController; close: () => Promise<void> };
const suite = targetSuite<KubeTarget, X>(
  'lbaas-ports (real kube-apiserver + real Keystone and Neutron)',
  realTarget,
  {
    off: os === undefined,
    setup: async (t, kube) => {
      const dir = mkdtempSync(join(tmpdir(), 'twopass-lbaas-real-'));
      writeFileSync(
        join(dir, 'clouds.yaml'),
        `clouds:\n  real:\n    auth_type: v3applicationcredential\n    region_name: ${os!.region}\n    interface: public\n    auth:\n      auth_url: ${os!.authUrl}\n      application_credential_id: ${os!.appCred.id}\n      application_credential_secret: ${os!.appCred.secret}\n`,
      );
      const env = { OS_CLOUD: 'real', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') };
      // The stand-in ch-k8s-lbaas controller, on the real Neutron with the project's credentials.
      const { neutron: n, close } = neutronFor(env);
      const ctl = new StandInController({
        kube,
        neutron: n,
        projectId: os!.project.id,
        namespace: await t.namespace(),
      });
      return { env, ctl, close };
    },
    // Every test begins as the operator's procedure leaves it: the controller scaled to 0.
    beforeEach: async (x) => {
      ctlSetting = x.ctl.setting;
      await x.ctl.stop();
    },
    teardown: (x) => x.close(),
  },
);
const it = (
  name: string,
  fn: (
    t: KubeTarget,
    kube: KubeHttpClient,
    env: Record<string, string>,
    ctl: StandInController,
  ) => Promise<void>,
) => suite.it(name, (t, kube, x) => fn(t, kube, x.env, x.ctl));

let ctlSetting: { namespace: string; deployment: string } | undefined;
const mk = (
  t: KubeTarget,
  ns: string,
  env: Record<string, string>,
  settings: Record<string, unknown> = {},
  fn: typeof lbaasPorts = lbaasPorts,
) =>
  runner(
    fn,
    t.options,
    [ns],
    Date.now() + MIN,
    {
      enabled: true,
      maxEvidenceDropPercent: 100,
      settings: { projectId: os!.project.id, controller: ctlSetting, ...settings },
    },
    env,
  );

it("the founding incident: after a controller restart the in-use port and FIP stay; the gone Service's go, the port first, with If-Match", async (t, kube, env) => {
  const ns = await t.namespace();
  const ingress = await controllerPort();
  const old = await controllerPort();
  await createService(kube, ns, 'ingress-nginx-controller', { portId: ingress.port.id });
  await setIngress(kube, ns, 'ingress-nginx-controller', ingress.fip!.floating_ip_address);
  await createService(kube, ns, 'old-app', { portId: old.port.id });
  const r = mk(t, ns, env);
  assert.equal((await r.run()).deleted, [], 'the restart: every Service still names its port');
  await kube.delete(SERVICES, ns, 'old-app');
  r.now += MIN;
  assert.equal((await r.run()).deleted, []);
  r.now += 15 * MIN;
  assert.equal((await r.run()).deleted, [], 'inside the 30 min grace');
  r.now += 16 * MIN;
  const res = await r.run();
  assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
  assert.equal(res.deleted, [old.fip!.id, old.port.id], 'the port and its FIP, each counted');
  assert.equal(res.deletedByKind, { FloatingIP: 1, Port: 1 });
  assert.not.ok(await exists('ports', old.port.id));
  assert.not.ok(await exists('floatingips', old.fip!.id));
  assert.ok(await exists('ports', ingress.port.id), 'the in-use port survives');
  assert.ok(await exists('floatingips', ingress.fip!.id), 'the in-use FIP survives');
  await kube.delete(SERVICES, ns, 'ingress-nginx-controller');
  await neutron('DELETE', `/floatingips/${ingress.fip!.id}`);
  await neutron('DELETE', `/ports/${ingress.port.id}`);
});

it('tombstones and restore on the real Neutron: the deleted port comes back with its fixed IP and tags, its floating IP with its address (new ids reported); refused once the address is taken', async (t, kube, env) => {
  const ns = await t.namespace();
  const a = await controllerPort();
  const b = await controllerPort();
  await createService(kube, ns, 'a', { portId: a.port.id });
  await createService(kube, ns, 'b', { portId: b.port.id });
  const r = mk(t, ns, env);
  await r.run();
  await kube.delete(SERVICES, ns, 'a');
  await kube.delete(SERVICES, ns, 'b');
  r.now += MIN;
  await r.run();
  r.now += 31 * MIN;
  const res = await r.run();
  assert.ok(
    res.deleted.includes(a.port.id) && res.deleted.includes(b.port.id),
    JSON.stringify(r.events('delete.failed')),
  );
  const tombs = await new FileTombstones(r.dir, () => r.now).list('lbaas-ports');
  const ta = tombs.find((x) => x.key === a.port.id)!;
  const tb = tombs.find((x) => x.key === b.port.id)!;
  const before = ta.object as {
    port: { fixed_ips: { ip_address: string }[]; tags: string[] };
    floatingIp: { floating_ip_address: string };
  };
  assert.is(
    before.port.fixed_ips[0]!.ip_address,
    a.port.fixed_ips[0]!.ip_address,
    'the port exactly as it was read',
  );
  assert.is(before.floatingIp.floating_ip_address, a.fip!.floating_ip_address);
  // b's fixed IP goes to another port meanwhile
  const squatter = (
    await neutron('POST', '/ports', {
      port: { network_id: os!.networkId, fixed_ips: [{ ip_address: b.port.fixed_ips[0]!.ip_address }] },
    })
  ).port as { id: string };
  const cfg = join(r.dir, 'config.yaml');
  writeFileSync(
    cfg,
    stringify({
      functions: {
        'lbaas-ports': { enabled: true, settings: { projectId: os!.project.id, controller: ctlSetting } },
      },
    }),
  );
  const kc = join(r.dir, 'kubeconfig');
  writeFileSync(kc, t.kubeconfig());
  // choosing a floating IP's address is admin-only in Neutron's default policy: the restore runs as an admin
  const adminClouds = join(r.dir, 'admin.yaml');
  writeFileSync(
    adminClouds,
    `clouds:\n  real:\n    region_name: ${os!.region}\n    interface: public\n    auth:\n      auth_url: ${os!.authUrl}\n      username: admin\n      password: ${os!.admin.password}\n      user_domain_name: Default\n      project_name: admin\n      project_domain_name: Default\n`,
  );
  const restoreArgs = (more: string[]) => [
    'restore',
    'lbaas-ports',
    '--state',
    `file:${r.dir}`,
    '--kubeconfig',
    kc,
    '--config',
    cfg,
    '--output',
    'json',
    ...more,
  ];
  const cli = (...more: string[]) =>
    twopassAsync(restoreArgs(more), { OS_CLOUD: 'real', OS_CLIENT_CONFIG_FILE: adminClouds });
  const dry = await cli('--key', a.port.id, '--key', b.port.id);
  const lines = (x: { out: string }) =>
    x.out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.is(dry.code, 1, dry.out + dry.err);
  assert.ok(
    lines(dry).some((l) => l.key === ta.key && l.event === 'restore.ready'),
    dry.out,
  );
  assert.ok(
    lines(dry).some(
      (l) =>
        l.key === tb.key &&
        l.event === 'restore.refused' &&
        String(l.reason).includes(`held by port ${squatter.id}`),
    ),
    dry.out,
  );
  // with the member's credentials the floating IP's address cannot be chosen: refused before anything is made
  const member = await twopassAsync(restoreArgs(['--key', a.port.id, '--apply']), env);
  assert.is(member.code, 1, member.out + member.err);
  assert.match(member.out, /needs an admin's credentials.*roles [^:]*member[^:]*: nothing was created/);
  assert.equal(
    (
      (await neutron('GET', `/ports?fixed_ips=ip_address%3D${a.port.fixed_ips[0]!.ip_address}`))
        .ports as unknown[]
    ).length,
    0,
    'no port was made for it',
  );
  const applied = await cli('--key', a.port.id, '--apply');
  assert.is(applied.code, 0, applied.out + applied.err);
  const done = lines(applied).find((l) => l.event === 'restore.restored')!;
  const ids = done.ids as { port: string; floatingIp: string };
  assert.ok(ids.port && ids.port !== a.port.id, 'a new port id is reported');
  const port = (await neutron('GET', `/ports/${ids.port}`)).port as {
    fixed_ips: { ip_address: string }[];
    tags: string[];
    name: string;
    description: string;
    device_owner: string;
    device_id: string;
    port_security_enabled: boolean;
    security_groups: string[];
  };
  assert.is(port.fixed_ips[0]!.ip_address, a.port.fixed_ips[0]!.ip_address, 'the same fixed IP');
  assert.ok(port.tags.includes(MANAGED_TAG), 'its tags');
  // as the controller made it: without port security and groups traffic to it would be dropped
  assert.is(port.port_security_enabled, false, 'no port security');
  assert.equal(port.security_groups, [], "no security group (not the project's default)");
  assert.is(port.name, '');
  assert.is(port.device_owner, '');
  assert.is(port.device_id, '');
  assert.is(port.description, 'Managed by cah-loadbalancer');
  assert.match(String(done.detail), /the port's id is new.*adopts it only when it next starts/);
  const fip = (await neutron('GET', `/floatingips/${ids.floatingIp}`)).floatingip as {
    floating_ip_address: string;
    port_id: string;
  };
  assert.is(fip.floating_ip_address, a.fip!.floating_ip_address, 'the same floating IP address');
  assert.is(fip.port_id, ids.port, 'on the new port');
  await neutron('DELETE', `/floatingips/${ids.floatingIp}`);
  await neutron('DELETE', `/ports/${ids.port}`);
  await neutron('DELETE', `/ports/${squatter.id}`);
  if (b.fip) await neutron('DELETE', `/floatingips/${b.fip.id}`).catch(() => {});
});

it('a managed Service being placed (no port annotation yet) makes free ports indeterminate, naming it', async (t, kube, env) => {
  const ns = await t.namespace();
  const free = await controllerPort([MANAGED_TAG], false);
  await createService(kube, ns, 'being-placed', {});
  const r = mk(t, ns, env);
  await r.run();
  r.now += 31 * MIN;
  assert.equal((await r.run()).deleted, []);
  assert.ok(await exists('ports', free.port.id));
  assert.ok(
    r.events('target.indeterminate').some((e) => String(e.reason).includes(`${ns}/being-placed`)),
    'the run names the Service that blocks',
  );
  await kube.delete(SERVICES, ns, 'being-placed');
  await neutron('DELETE', `/ports/${free.port.id}`);
});

it('a port changed between the observations (its revision moved) restarts its observation; a keep tag protects', async (t, _kube, env) => {
  const ns = await t.namespace();
  const moved = await controllerPort([MANAGED_TAG], false);
  const kept = await controllerPort([MANAGED_TAG, 'twopass.io/keep'], false);
  const r = mk(t, ns, env);
  await r.run();
  await neutron('PUT', `/ports/${moved.port.id}`, { port: { name: 'taken-by-another-service' } });
  r.now += 31 * MIN;
  const res = await r.run();
  assert.equal(res.deleted, [], 'the revision moved: a new first observation');
  assert.ok(r.events('candidate.reset').some((e) => e.key === moved.port.id));
  r.now += 31 * MIN;
  const later = await r.run();
  assert.equal(later.deleted, [moved.port.id], 'gone two unchanged observations later');
  assert.ok(await exists('ports', kept.port.id), 'the keep tag protects');
  await neutron('DELETE', `/ports/${kept.port.id}`);
});

it('a FIP re-associated to a port in use between the observations: the old port goes later, the FIP stays with its new port', async (t, kube, env) => {
  const ns = await t.namespace();
  const old = await controllerPort();
  const inUse = await controllerPort([MANAGED_TAG], false);
  await createService(kube, ns, 'svc', { portId: inUse.port.id });
  const r = mk(t, ns, env);
  await r.run();
  await neutron('PUT', `/floatingips/${old.fip!.id}`, { floatingip: { port_id: inUse.port.id } });
  r.now += 31 * MIN;
  assert.equal((await r.run()).deleted, [], 'the unit changed: observation restarts');
  r.now += 31 * MIN;
  const res = await r.run();
  assert.equal(res.deleted, [old.port.id]);
  assert.ok(await exists('floatingips', old.fip!.id), 'the FIP is on a port in use now: kept');
  assert.not.ok(
    r.events('resource.deleted').some((e) => e.kind === 'FloatingIP'),
    'no FIP deletion is counted',
  );
  const fip = (await neutron('GET', `/floatingips/${old.fip!.id}`)).floatingip as { port_id: string };
  assert.is(fip.port_id, inUse.port.id);
  await kube.delete(SERVICES, ns, 'svc');
  await neutron('DELETE', `/floatingips/${old.fip!.id}`);
  await neutron('DELETE', `/ports/${inUse.port.id}`);
});

it('a port whose managed tag was removed between the observations is no target: never deleted', async (t, _kube, env) => {
  const ns = await t.namespace();
  const p = await controllerPort([MANAGED_TAG], false);
  const r = mk(t, ns, env);
  await r.run();
  await neutron('PUT', `/ports/${p.port.id}/tags`, { tags: [] });
  for (let i = 0; i < 2; i++) {
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, []);
  }
  assert.ok(await exists('ports', p.port.id));
  assert.ok(r.events('candidate.reset').some((e) => e.key === p.port.id && e.reason === 'target vanished'));
  await neutron('DELETE', `/ports/${p.port.id}`);
});

it('bad input: a managed port with no fixed IP is kept while a Service names it', async (t, kube, env) => {
  const ns = await t.namespace();
  const port = (
    await neutron('POST', '/ports', {
      port: { network_id: os!.networkId, name: 'no-ip', fixed_ips: [] },
    })
  ).port as { id: string; fixed_ips: unknown[] };
  assert.equal(port.fixed_ips, []);
  await neutron('PUT', `/ports/${port.id}/tags`, { tags: [MANAGED_TAG] });
  await createService(kube, ns, 'named', { portId: port.id });
  const r = mk(t, ns, env);
  await r.run();
  r.now += 31 * MIN;
  assert.equal((await r.run()).deleted, []);
  assert.ok(await exists('ports', port.id));
  await kube.delete(SERVICES, ns, 'named');
  await neutron('DELETE', `/ports/${port.id}`);
});

it('bad input: a tagged FIP of the project on a port of another project is reported, never deleted', async (t, _kube, env) => {
  const ns = await t.namespace();
  const admin = await passwordToken(os!.authUrl, 'admin', os!.admin.password, 'admin');
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${os!.neutronUrl}/v2.0${path}`, {
      method,
      headers: { 'x-auth-token': admin, 'content-type': 'application/json' },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.text()) || '{}' };
  };
  const theirs = JSON.parse(
    (
      await call('POST', '/ports', {
        port: { network_id: os!.networkId, project_id: 'someone-else', name: 'theirs' },
      })
    ).body,
  ).port as { id: string };
  const made = await call('POST', '/floatingips', {
    floatingip: {
      floating_network_id: os!.externalNetworkId,
      project_id: os!.project.id,
      port_id: theirs.id,
    },
  });
  if (made.status !== 201) {
    // Neutron refuses a FIP of one project on another project's port: the case cannot arise here
    console.log(`  (Neutron refused a FIP on another project's port: ${made.status})`);
    assert.match(made.body, /NeutronError/);
    await call('DELETE', `/ports/${theirs.id}`);
    return;
  }
  const fip = JSON.parse(made.body).floatingip as { id: string };
  await call('PUT', `/floatingips/${fip.id}/tags`, { tags: [MANAGED_TAG] });
  const r = mk(t, ns, env);
  await r.run();
  r.now += 31 * MIN;
  assert.equal((await r.run()).deleted, []);
  assert.ok(r.events('fip.unassociated').some((e) => String(e.name).includes(fip.id)));
  assert.ok(await exists('floatingips', fip.id));
  await call('DELETE', `/floatingips/${fip.id}`);
  await call('DELETE', `/ports/${theirs.id}`);
});

it("a projectId that is not the credentials' (nor visible to them) is a configuration error (exit 2), not an empty run", async (t, _kube, env) => {
  const ns = await t.namespace();
  const r = mk(t, ns, env, { projectId: 'no-such-project' });
  const res = await r.run();
  assert.is(res.exitCode, EXIT.config);
  assert.match(
    String(r.events('run.aborted')[0]?.reason),
    /project no-such-project is not the project of these credentials.*check settings\.projectId/,
  );
});

it('the CLI: `twopass run lbaas-ports --apply` with a password clouds.yaml, an application credential, and OS_* variables', async (t, kube) => {
  const ns = await t.namespace();
  const dir = mkdtempSync(join(tmpdir(), 'twopass-lbaas-cli-'));
  const files = cliFiles(
    dir,
    t.kubeconfig(),
    `allowShortGrace: true\nfunctions:\n  lbaas-ports:\n    enabled: true\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    maxEvidenceDropPercent: 100\n    settings:\n      projectId: ${os!.project.id}\n      controller: { namespace: ${ctlSetting!.namespace}, deployment: ${ctlSetting!.deployment} }\n`,
  );
  const auth = `      auth_url: ${os!.authUrl.replace(/\/v3$/, '')}\n`; // the root: found by version discovery
  writeFileSync(
    join(dir, 'clouds.yaml'),
    `clouds:\n  pw:\n    region_name: RegionOne\n    auth:\n${auth}      username: ${os!.user.name}\n      password: ${os!.user.password}\n      user_domain_name: Default\n      project_name: ${os!.project.name}\n      project_domain_name: Default\n  ac:\n    auth_type: v3applicationcredential\n    region_name: RegionOne\n    auth:\n${auth}      application_credential_id: ${os!.appCred.id}\n      application_credential_secret: ${os!.appCred.secret}\n`,
  );
  const envs: Record<string, string>[] = [
    { OS_CLOUD: 'pw', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') },
    { OS_CLOUD: 'ac', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') },
    {
      OS_AUTH_URL: os!.authUrl,
      OS_USERNAME: os!.user.name,
      OS_PASSWORD: os!.user.password,
      OS_USER_DOMAIN_NAME: 'Default',
      OS_PROJECT_NAME: os!.project.name,
      OS_PROJECT_DOMAIN_NAME: 'Default',
      OS_REGION_NAME: 'RegionOne',
    },
  ];
  for (const [i, env] of envs.entries()) {
    const leak = await controllerPort();
    const args = ['run', 'lbaas-ports', ...files, '--state', `file:${join(dir, `state-${i}`)}`, '--apply'];
    const first = await twopassAsync(args, env);
    assert.is(first.code, 0, `${Object.keys(env).join(',')}: ${first.err}${first.out.slice(-500)}`);
    const second = await twopassAsync(args, env);
    assert.is(second.code, 0, second.out.slice(-500));
    assert.ok(
      second.json().some((e) => e.event === 'resource.deleted' && e.key === leak.port.id),
      `${Object.keys(env)[0]}: deleted`,
    );
    assert.not.ok(await exists('ports', leak.port.id));
    assert.not.ok(await exists('floatingips', leak.fip!.id));
  }
  void kube;
  void ns;
});

it('the unit order: a port changed (and named by a new Service) just before its DELETE keeps its FIP', async (t, kube, env) => {
  const ns = await t.namespace();
  const unit = await controllerPort();
  // Just before the port's DELETE, the controller hands the port to a new Service (a write
  // to the port: its revision moves). The DELETE's If-Match then fails; the FIP must stay.
  const fn = changedBeforeDelete(lbaasPorts, async (portId) => {
    await neutron('PUT', `/ports/${portId}`, { port: { name: 'taken-by-new-service' } });
    await createService(kube, ns, 'new-service', { portId });
  });
  const r = runner(
    fn,
    t.options,
    [ns],
    Date.now() + MIN,
    {
      enabled: true,
      maxEvidenceDropPercent: 100,
      settings: { projectId: os!.project.id, controller: ctlSetting },
    },
    env,
  );
  await r.run();
  r.now += 31 * MIN;
  const res = await r.run();
  assert.is(res.exitCode, EXIT.ok);
  assert.equal(res.deleted, [], 'nothing deleted');
  assert.ok(await exists('ports', unit.port.id), 'the port stays (412)');
  assert.ok(
    await exists('floatingips', unit.fip!.id),
    'its FIP stays: the new Service still has its address',
  );
  assert.ok(
    r.events('delete.skipped').some((e) => e.key === unit.port.id && String(e.reason).includes('412')),
  );
  await kube.delete(SERVICES, ns, 'new-service');
  await neutron('DELETE', `/floatingips/${unit.fip!.id}`);
  await neutron('DELETE', `/ports/${unit.port.id}`);
});

it('beside the running controller (its stand-in, on the real Neutron): confirmed ports are held; the free port it then hands to a new Service from memory is still there; at 0 replicas the other is reclaimed', async (t, kube, env, ctl) => {
  const ns = await t.namespace();
  const a = await controllerPort();
  const b = await controllerPort();
  const r = mk(t, ns, env, {}, lbaasPorts);
  await r.run();
  await ctl.start();
  assert.ok(ctl.free().includes(a.port.id) && ctl.free().includes(b.port.id), 'both loaded as free');
  r.now += 31 * MIN;
  const held = await r.run();
  assert.is(held.outcome, 'held');
  assert.is(held.exitCode, EXIT.ok);
  assert.equal([...held.held].sort(), [a.port.id, b.port.id].sort());
  assert.ok((await exists('ports', a.port.id)) && (await exists('ports', b.port.id)), 'nothing deleted');
  // A new LoadBalancer Service: the controller gives it a port from memory, writing nothing to Neutron.
  const rev = ((await neutron('GET', `/ports/${a.port.id}`)).port as { revision_number: number })
    .revision_number;
  await createService(kube, ns, 'new-app', { managed: false });
  const given = await ctl.place(ns, 'new-app');
  assert.ok(given === a.port.id || given === b.port.id);
  assert.equal(ctl.failures, [], 'the port it gave was there');
  const after = ((await neutron('GET', `/ports/${given}`)).port as { revision_number: number })
    .revision_number;
  if (given === a.port.id) assert.is(after, rev, 'no revision moved: If-Match could never have seen it');
  await ctl.stop();
  r.now += MIN;
  const res = await r.run();
  const other = given === a.port.id ? b : a;
  assert.equal(res.deleted, [other.fip!.id, other.port.id], 'at 0 replicas: the port no Service has');
  assert.ok(await exists('ports', given!), "the new Service's port stays");
  await kube.delete(SERVICES, ns, 'new-app');
  const mine = given === a.port.id ? a : b;
  await neutron('DELETE', `/floatingips/${mine.fip!.id}`);
  await neutron('DELETE', `/ports/${mine.port.id}`);
});

it('the controller starts between the re-check and the DELETE: held, no DELETE; it starts while a DELETE is in flight: the deletes stop, told unproven, exit 1', async (t, _kube, env, ctl) => {
  const ns = await t.namespace();
  const a = await controllerPort();
  const early = mk(
    t,
    ns,
    env,
    {},
    beforeRecheck(lbaasPorts, () => ctl.start()),
  );
  await early.run();
  early.now += 31 * MIN;
  const held = await early.run();
  assert.is(held.outcome, 'held');
  assert.equal(held.held, [a.port.id]);
  assert.ok(await exists('ports', a.port.id));
  await ctl.stop();
  const b = await controllerPort();
  const c = await controllerPort();
  const late = mk(
    t,
    ns,
    env,
    { concurrency: 1 },
    changedBeforeDelete(lbaasPorts, async () => {
      if (!ctl.running) await ctl.start();
    }),
  );
  await late.run();
  late.now += 31 * MIN;
  const res = await late.run();
  assert.is(res.outcome, 'held');
  assert.is(res.exitCode, EXIT.error);
  const gone: string[] = [];
  for (const p of [a, b, c]) if (!(await exists('ports', p.port.id))) gone.push(p.port.id);
  assert.is(gone.length, 1, 'one DELETE went, the rest were not attempted');
  assert.is(res.held.length, 2);
  const line = late.events('resource.deleted').find((e) => e.key === gone[0]);
  assert.is(line?.unproven, true);
  assert.match(String(late.events('controller.started')[0]?.reason), /restart it/);
  assert.ok(ctl.free().includes(gone[0]!), 'the deleted port is free in its memory: why it must restart');
  await ctl.stop();
  for (const p of [a, b, c])
    if (p.port.id !== gone[0]) {
      await neutron('DELETE', `/floatingips/${p.fip!.id}`);
      await neutron('DELETE', `/ports/${p.port.id}`);
    }
});

it('decommissioned (`controller: none`): reclaimed without any Deployment; a missing Deployment otherwise is doubt (exit 3)', async (t, _kube, env, ctl) => {
  const ns = await t.namespace();
  const a = await controllerPort();
  const missing = mk(t, ns, env, {
    controller: { namespace: ctl.setting.namespace, deployment: 'gone-for-good' },
  });
  assert.is((await missing.run()).exitCode, EXIT.incomplete);
  const r = mk(t, ns, env, { controller: 'none' });
  await r.run();
  r.now += 31 * MIN;
  assert.equal((await r.run()).deleted, [a.fip!.id, a.port.id]);
  assert.not.ok(await exists('ports', a.port.id));
});

suite.run();
