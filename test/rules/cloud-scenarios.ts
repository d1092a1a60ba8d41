/**
 * The cpo-floating-ips pack (a rule whose targets are Neutron floating IPs), on two
 * targets: the fake API server with the fake Neutron, and the real kube-apiserver with the
 * real Keystone + Neutron. The same scenarios, the same assertions.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { type AnyFunction, type ConnectContext, MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { NODES, SERVICES } from '../../shared/kube/resources.ts';
import type { NeutronClient } from '../../shared/openstack/neutron.ts';
import { cloudRuleFunction } from '../../shared/rules/cloud-function.ts';
import type { CloudRule } from '../../shared/rules/cloud-rule.ts';
import { loadAnyRuleFile } from '../../shared/rules/registry.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { createService } from '../../shared/sandbox/scenarios/lbaas.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { type Runner, runner } from '../helpers/runner.ts';
import { parsed } from '../helpers/settings.ts';
import { targetSuite } from '../helpers/target-suite.ts';
import { testTime } from '../helpers/time.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
export const FIP_PACK = join(ROOT, 'functions/rules/cpo-floating-ips/rule.yaml');
export const CLUSTER = 'prod-1';

/** The cloud half of a target: floating IPs made as the controller makes them, and a clouds.yaml. */
export type CloudWorld = Readonly<{
  env: Record<string, string>;
  projectId: string;
  /** A floating IP with this description, on `portId` if given; its id. */
  fip: (description: string, portId?: string) => Promise<string>;
  /** A port (in these security groups if given, of this server if given); its id. */
  port: (securityGroups?: string[], deviceId?: string) => Promise<string>;
  /** The security groups a port is in now. */
  portGroups: (id: string) => Promise<string[]>;
  exists: (id: string) => Promise<boolean>;
  /** Changes the floating IP (its revision moves). */
  touch: (id: string) => Promise<void>;
  /** Tags the floating IP `twopass.io/keep`, as an operator marks one kept on purpose. */
  keep: (id: string) => Promise<void>;
  /** A security group with this name and description; its id. */
  sg: (name: string, description: string) => Promise<string>;
  sgExists: (id: string) => Promise<boolean>;
  /** The environment of an admin's credentials (its token sees every project). */
  adminEnv: Record<string, string>;
  /** A floating IP in another project (made as its admin); its id. */
  foreignFip: (description: string) => Promise<string>;
  /** Whether it exists, as its project's admin sees it (a member's token cannot). */
  foreignExists: (id: string) => Promise<boolean>;
}>;

export const SG_PACK = join(ROOT, 'functions/rules/cpo-security-groups/rule.yaml');
export const sgDescription = (service: string, cluster = CLUSTER) =>
  `Security Group for ${service} Service LoadBalancer in cluster ${cluster}`;

export const describe = (service: string, cluster = CLUSTER) =>
  `Floating IP for Kubernetes external service ${service} from cluster ${cluster}`;

/** A rule's settings in the tests: the project, the cluster, and every acknowledgement the rule asks for, given. */
export const settingsFor = (r: Pick<CloudRule, 'acknowledgements'>, projectId: string, extra = {}) => ({
  projectId,
  cluster: CLUSTER,
  ...Object.fromEntries(r.acknowledgements.map((a) => [a.setting, true])),
  ...extra,
});

/** A run that records, the clock past the 30 min grace, and the run that may delete (its result). */
export async function pastGrace(r: Runner) {
  await r.run();
  r.now += 31 * MIN;
  return r.run();
}

export function cloudRuleScenarios(
  label: string,
  getTarget: () => Promise<KubeTarget | undefined>,
  world: (() => Promise<CloudWorld & { close: () => Promise<void> }>) | undefined,
): void {
  const rule = loadAnyRuleFile(FIP_PACK)[0] as CloudRule;
  const suite = targetSuite(`rule cpo-floating-ips (${label})`, getTarget, {
    off: world === undefined,
    setup: async () => world!(),
    teardown: (w) => w.close(),
  });
  const mk = (t: KubeTarget, w: CloudWorld, r: CloudRule = rule) =>
    runner(
      cloudRuleFunction(r),
      t.options,
      [],
      Date.now() + MIN,
      { enabled: true, maxEvidenceDropPercent: 100, settings: settingsFor(r, w.projectId) },
      w.env,
    );
  const it = (name: string, fn: (t: KubeTarget, kube: KubeHttpClient, w: CloudWorld) => Promise<void>) =>
    suite.it(name, (t, kube, w) => fn(t, kube, w as CloudWorld));

  it('a floating IP whose Service is gone is deleted after the grace, with If-Match; its neighbour whose Service exists stays; a ClusterIP Service holds none', async (t, kube, w) => {
    const ns = await t.namespace();
    const live = await w.fip(describe(`${ns}/web`));
    const gone = await w.fip(describe(`${ns}/old`));
    const demoted = await w.fip(describe(`${ns}/internal`));
    await createService(kube, ns, 'web');
    await createService(kube, ns, 'internal', { type: 'ClusterIP' });
    const r = mk(t, w);
    assert.equal((await r.run()).deleted, []);
    r.now += 20 * MIN;
    assert.equal((await r.run()).deleted, [], 'inside the 30 min grace');
    r.now += 11 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.equal([...res.deleted].sort(), [gone, demoted].sort());
    assert.ok(await w.exists(live), 'the Service of type LoadBalancer holds its floating IP');
    assert.not.ok(await w.exists(gone));
    assert.not.ok(await w.exists(demoted));
  });

  it('no tombstone, no deletion; the tombstone holds the floating IP as it was; restore allocates its address again (a new id), refused while the address is taken', async (t, _kube, w) => {
    const ns = await t.namespace();
    const id = await w.fip(describe(`${ns}/gone`));
    const r = mk(t, w);
    const tombPath = join(r.dir, 'cpo-floating-ips.tombstones.json.gz');
    mkdirSync(tombPath, { recursive: true });
    await r.run();
    r.now += 31 * MIN;
    const refused = await r.run();
    assert.not.ok(refused.deleted.includes(id), 'no tombstone, no deletion');
    assert.ok(await w.exists(id));
    rmSync(tombPath, { recursive: true });
    r.now += MIN;
    const res = await r.run();
    assert.ok(res.deleted.includes(id), JSON.stringify(r.events('delete.failed')));
    const tomb = (await new FileTombstones(r.dir, () => r.now).list('cpo-floating-ips')).find(
      (x) => x.key === id,
    )!;
    const addr = (tomb.object as { floating_ip_address: string }).floating_ip_address;
    assert.match(String((tomb.object as { description: string }).description), /from cluster/);
    const fn = cloudRuleFunction(rule);
    // choosing a floating IP's address is admin-only in Neutron's default policy: restored as an admin
    const ports = await fn.connect!({
      kube: t.client(),
      settings: parsed(fn, settingsFor(rule, w.projectId, { pageSize: 100 })),
      env: w.adminEnv,
      time: testTime(),
      callTimeoutMs: 10_000,
      pageSize: 100,
    });
    const ctx = (apply: boolean) => ({
      now: r.now,
      signal: AbortSignal.timeout(30_000),
      settings: parsed(fn, settingsFor(rule, w.projectId)),
      note: () => {},
      apply,
    });
    try {
      assert.is((await fn.restore(ports.reader, ports.writer, tomb, ctx(false))).outcome, 'ready');
      const back = await fn.restore(ports.reader, ports.writer, tomb, ctx(true));
      assert.is(back.outcome, 'restored', JSON.stringify(back));
      const newId = (back as unknown as { ids: { floatingIp: string } }).ids.floatingIp;
      assert.ok(newId && newId !== id && (await w.exists(newId)), 'a new floating IP');
      const again = await fn.restore(ports.reader, ports.writer, tomb, ctx(false));
      assert.is(again.outcome, 'refused');
      assert.match(JSON.stringify(again), new RegExp(`${addr.replaceAll('.', '\\.')} is allocated again`));
      // not left for the scenarios after (it would be judged unused there)
      await (ports.writer as { neutron: NeutronClient }).neutron.deleteFloatingIp(newId, undefined);
    } finally {
      await ports.close();
    }
  });

  it('a Service deleted and re-created under the same name keeps its floating IP', async (t, kube, w) => {
    const ns = await t.namespace();
    const id = await w.fip(describe(`${ns}/app`));
    await createService(kube, ns, 'app');
    const r = mk(t, w);
    await r.run();
    await kube.delete(SERVICES, ns, 'app');
    r.now += MIN;
    await r.run(); // it sees the floating IP unused: a candidate
    await createService(kube, ns, 'app');
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, [], 'the re-created Service holds it again');
    assert.ok(await w.exists(id));
    assert.ok(r.events('candidate.rescued').some((e) => e.key === id));
  });

  it("ownership: another cluster's floating IPs and ones without the controller's description are never judged; one still on a port is undecided", async (t, _kube, w) => {
    const ns = await t.namespace();
    const other = await w.fip(describe(`${ns}/gone`, 'prod-2'));
    const prefix = await w.fip(describe(`${ns}/gone`, `${CLUSTER}0`));
    const plain = await w.fip(`made by hand for ${ns}/gone from cluster ${CLUSTER}`);
    const attached = await w.fip(describe(`${ns}/gone-too`), await w.port());
    const r = mk(t, w);
    const res = await pastGrace(r);
    assert.equal(res.deleted, []);
    for (const id of [other, prefix, plain, attached]) assert.ok(await w.exists(id));
    const judged = new Set(r.lines.filter((l) => typeof l.key === 'string').map((l) => l.key));
    for (const id of [other, prefix, plain]) assert.not.ok(judged.has(id), `${id} is not this cluster's`);
    assert.ok(
      r
        .events('target.indeterminate')
        .some((e) => e.key === attached && /still associated with port/.test(String(e.reason))),
      'on a port: undecided',
    );
  });

  it('keep-floatingip: a floating IP kept on purpose after its Service went (the controller leaves it as it was) is kept by the keep-mark the pack asks for; its unmarked twin goes', async (t, kube, w) => {
    const ns = await t.namespace();
    // both Services had load balancers; `kept` carried keep-floatingip, so the controller left
    // its floating IP (description unchanged, on no port) when the Service was deleted
    const kept = await w.fip(describe(`${ns}/kept`));
    const leaked = await w.fip(describe(`${ns}/leaked`));
    await w.keep(kept);
    await createService(kube, ns, 'kept');
    await kube.delete(SERVICES, ns, 'kept');
    const r = mk(t, w);
    const res = await pastGrace(r);
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.ok(res.deleted.includes(leaked), 'the unmarked one is a leak like any other');
    assert.not.ok(res.deleted.includes(kept));
    assert.ok(await w.exists(kept), 'the marked one stays');
    r.now += 31 * MIN;
    assert.not.ok((await r.run()).deleted.includes(kept), 'and stays on every later run');
    assert.ok(await w.exists(kept));
  });

  it('a floating IP changed between the observations is not deleted: its revision is its fingerprint', async (t, _kube, w) => {
    const ns = await t.namespace();
    const id = await w.fip(describe(`${ns}/gone`));
    const r = mk(t, w);
    await r.run();
    r.now += 31 * MIN;
    await w.touch(id);
    assert.equal((await r.run()).deleted, [], 'a new revision starts its grace again');
    assert.ok(await w.exists(id));
    r.now += 31 * MIN;
    assert.equal((await r.run()).deleted, [id], 'then, unchanged a grace apart, it goes');
  });

  it('a floating IP changed between the re-check and the DELETE is kept: the DELETE carries If-Match and Neutron answers 412', async (t, _kube, w) => {
    const ns = await t.namespace();
    const id = await w.fip(describe(`${ns}/gone`));
    const fn = cloudRuleFunction(rule);
    // the writer's delete, once: the floating IP is changed just before it goes out
    const racing: AnyFunction = {
      ...fn,
      async connect(ctx: ConnectContext) {
        const ports = await fn.connect!(ctx);
        const real = ports.writer.neutron as NeutronClient;
        const neutron = Object.create(real) as NeutronClient;
        neutron.deleteFloatingIp = async (fid, revision, signal) => {
          await w.touch(fid);
          return real.deleteFloatingIp(fid, revision, signal);
        };
        return { ...ports, writer: { ...ports.writer, neutron } };
      },
    };
    const r = runner(
      racing,
      t.options,
      [],
      Date.now() + MIN,
      { enabled: true, maxEvidenceDropPercent: 100, settings: settingsFor(rule, w.projectId) },
      w.env,
    );
    const res = await pastGrace(r);
    assert.equal(res.deleted, []);
    assert.ok(await w.exists(id), 'kept: it changed after the re-check');
    assert.ok(
      r.lines.some((l) => l.key === id && /412/.test(JSON.stringify(l))),
      'the skip says 412',
    );
  });

  it('report-only: the same rule finds and reports, and never deletes, even with --apply', async (t, _kube, w) => {
    const ns = await t.namespace();
    const id = await w.fip(describe(`${ns}/gone`));
    const r = mk(t, w, { ...rule, reportOnly: true });
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run(true);
    assert.equal(res.deleted, []);
    assert.is(res.dryRun, true);
    assert.ok(
      r.events('candidate.confirmed').some((e) => e.key === id),
      'reported as confirmed',
    );
    assert.ok(r.events('run.report-only').length > 0);
    assert.ok(await w.exists(id));
  });

  it("another project's floating IP is never judged, even by an admin's token that sees every project", async (t, _kube, w) => {
    const ns = await t.namespace();
    const foreign = await w.foreignFip(describe(`${ns}/gone`));
    const mine = await w.fip(describe(`${ns}/gone`));
    const r = runner(
      cloudRuleFunction(rule),
      t.options,
      [],
      Date.now() + MIN,
      { enabled: true, maxEvidenceDropPercent: 100, settings: settingsFor(rule, w.projectId) },
      w.adminEnv,
    );
    const res = await pastGrace(r);
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('run.finished')));
    // (leftovers of the scenarios before, in the same project, may go too)
    assert.ok(res.deleted.includes(mine), "the project's own goes");
    assert.not.ok(res.deleted.includes(foreign));
    assert.ok(await w.foreignExists(foreign), "the other project's stays");
    assert.not.ok(
      r.lines.some((l) => l.key === foreign),
      'and is never judged',
    );
  });

  it("security groups (cpo-security-groups): a gone Service's group goes, by the UID in its name; a Service re-created under the same name does not hold the old group; another cluster's is never judged", async (t, kube, w) => {
    const sgRule = loadAnyRuleFile(SG_PACK)[0] as CloudRule;
    const ns = await t.namespace();
    const web = await createService(kube, ns, 'web');
    const old = await createService(kube, ns, 'old');
    const liveSg = await w.sg(`lb-sg-${web.metadata.uid}-${ns}-web`, sgDescription(`${ns}/web`));
    const oldSg = await w.sg(`lb-sg-${old.metadata.uid}-${ns}-old`, sgDescription(`${ns}/old`));
    const otherSg = await w.sg(`lb-sg-${old.metadata.uid}-${ns}-old`, sgDescription(`${ns}/old`, 'prod-2'));
    const r = mk(t, w, sgRule);
    assert.equal((await r.run()).deleted, []);
    // deleted and re-created under the same name: a new UID
    await kube.delete(SERVICES, ns, 'old');
    await createService(kube, ns, 'old');
    r.now += MIN;
    const res = await pastGrace(r);
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.equal(res.deleted, [oldSg]);
    assert.ok(await w.sgExists(liveSg));
    assert.not.ok(await w.sgExists(oldSg));
    assert.ok(await w.sgExists(otherSg), "another cluster's group is never judged");
  });

  it("cpo-security-groups: a gone Service's group still on a node's port (where the controller put it) is taken off that port, with If-Match on the port's revision, then deleted; the port keeps its other groups; on a port that is no node's it waits", async (t, kube, w) => {
    const sgRule = loadAnyRuleFile(SG_PACK)[0] as CloudRule;
    const ns = await t.namespace();
    const server = randomUUID();
    const node = `${ns}-worker`;
    await kube.create(NODES, {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: node },
      spec: { providerID: `openstack:///${server}` },
    } as never);
    try {
      const gone = await createService(kube, ns, 'gone');
      const other = await w.sg(
        `lb-sg-${randomUUID()}-${ns}-other`,
        sgDescription(`${ns}/other-cluster`, 'prod-2'),
      );
      const leaked = await w.sg(`lb-sg-${gone.metadata.uid}-${ns}-gone`, sgDescription(`${ns}/gone`));
      const nodePort = await w.port([other, leaked], server);
      await kube.delete(SERVICES, ns, 'gone');
      const r = mk(t, w, sgRule);
      const res = await pastGrace(r);
      assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
      assert.ok(res.deleted.includes(leaked), JSON.stringify(r.lines.filter((l) => l.key === leaked)));
      assert.not.ok(await w.sgExists(leaked));
      assert.equal(await w.portGroups(nodePort), [other], 'taken off the node port; its other group stays');
      const tomb = (await new FileTombstones(r.dir, () => r.now).list(sgRule.name)).find(
        (x) => x.key === leaked,
      );
      assert.equal(
        (tomb!.object as { released_from?: { id: string }[] }).released_from?.map((p) => p.id),
        [nodePort],
        'the tombstone says which ports it was taken off',
      );
    } finally {
      await kube.delete(NODES, undefined, node).catch(() => undefined);
    }
  });

  it("cpo-security-groups: two gone Services' groups on the same node port both go in one run (the second write's 412 is answered by reading the port again)", async (t, kube, w) => {
    const sgRule = loadAnyRuleFile(SG_PACK)[0] as CloudRule;
    const ns = await t.namespace();
    const server = randomUUID();
    const node = `${ns}-worker`;
    await kube.create(NODES, {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: node },
      spec: { providerID: `openstack:///${server}` },
    } as never);
    try {
      const a = await w.sg(`lb-sg-${randomUUID()}-${ns}-a`, sgDescription(`${ns}/a`));
      const b = await w.sg(`lb-sg-${randomUUID()}-${ns}-b`, sgDescription(`${ns}/b`));
      const nodePort = await w.port([a, b], server);
      const res = await pastGrace(mk(t, w, sgRule));
      assert.equal([...res.deleted].filter((id) => id === a || id === b).sort(), [a, b].sort());
      assert.equal(await w.portGroups(nodePort), []);
    } finally {
      await kube.delete(NODES, undefined, node).catch(() => undefined);
    }
  });

  it('cloud evidence (cpo-security-groups lists the ports of the project): a group whose Service is gone but a port is still in is undecided, never deleted', async (t, kube, w) => {
    const sgRule = loadAnyRuleFile(SG_PACK)[0] as CloudRule;
    const ns = await t.namespace();
    const gone = await createService(kube, ns, 'gone');
    const held = await w.sg(`lb-sg-${gone.metadata.uid}-${ns}-gone`, sgDescription(`${ns}/gone`));
    const port = await w.port([held]);
    await kube.delete(SERVICES, ns, 'gone');
    const r = mk(t, w, sgRule);
    const res = await pastGrace(r);
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.not.ok(res.deleted.includes(held));
    assert.ok(await w.sgExists(held));
    assert.ok(
      r
        .events('target.indeterminate')
        .some(
          (e) =>
            e.key === held && String(e.reason).includes(`still in use by port ${port}, which is no node's`),
        ),
      JSON.stringify(r.events('target.indeterminate')),
    );
    const sources = (r.events('snapshot.taken').at(-1)?.sources ?? []) as { name: string; role: string }[];
    assert.ok(
      sources.some((x) => x.name === 'evidence.ports' && x.role === 'evidence'),
      `the ports are evidence of the snapshot: ${JSON.stringify(sources)}`,
    );
  });

  suite.run();
}
