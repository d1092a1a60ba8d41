/**
 * Cloud rules when they load: ownership must be explicit and name the cluster, the pattern
 * is RE2 and anchored, the cluster name is quoted into it; `rules check` explains how such a
 * rule deletes; the commands that take Kubernetes rules only refuse a cloud rule in one line.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { stringify } from 'yaml';
import { functionsOf } from '../../shared/catalogue.ts';
import { resolveConfig } from '../../shared/config.ts';
import { ConfigError } from '../../shared/errors.ts';
import { CLUSTER as CLUSTER_MARK, compileCloudRule } from '../../shared/rules/cloud-rule.ts';
import { twopass } from '../helpers/cli.ts';
import { parsed } from '../helpers/settings.ts';
import { CLUSTER, FIP_PACK, describe as fipDescription, settingsFor } from './cloud-scenarios.ts';

const test = suite('cloud rules: loading and explaining');

const base = {
  name: 'my-fips',
  description: 'test',
  target: { openstack: 'floatingips' },
  owner: { description: `Floating IP for (?P<service>\\S+) from cluster ${CLUSTER_MARK}` },
  evidence: {
    services: {
      group: '',
      version: 'v1',
      resource: 'services',
      kind: 'Service',
      namespaced: true,
      key: 'object.metadata.namespace + "/" + object.metadata.name',
    },
  },
  inUse: 'object.owner.service in evidence.services',
};

const write = (doc: unknown) => {
  const f = join(mkdtempSync(join(tmpdir(), 'twopass-cloud-')), 'rule.yaml');
  writeFileSync(f, stringify(doc));
  return f;
};

const refused = (doc: unknown, re: RegExp) => {
  let err: unknown;
  try {
    compileCloudRule(doc, 'test');
  } catch (e) {
    err = e;
  }
  assert.instance(err, ConfigError, `refused: ${re}`);
  assert.match((err as Error).message, re);
};

test('ownership is required, exactly one mark, and it names the cluster', () => {
  const { owner: _o, ...noOwner } = base;
  refused(noOwner, /owner/);
  refused({ ...base, owner: {} }, /exactly one mark of ownership/);
  refused({ ...base, owner: { tag: `a-${CLUSTER_MARK}`, name: `x-${CLUSTER_MARK}` } }, /exactly one mark/);
  refused(
    { ...base, owner: { description: 'Floating IP for .*' } },
    /must name the cluster as `\$\{cluster\}`/,
  );
  refused({ ...base, owner: { tag: 'kube-cluster' } }, /must name the cluster/);
  refused({ ...base, owner: { name: `(?<=x)${CLUSTER_MARK}` } }, /RE2 syntax/);
  refused({ ...base, target: { openstack: 'images' } }, /expected one of ports, floatingips/);
  // Cinder volumes are only ever reported, and have no tags
  refused({ ...base, target: { openstack: 'volumes' } }, /only ever reported: add `mode: report-only`/);
  refused(
    { ...base, mode: 'report-only', target: { openstack: 'volumes', tags: ['x'] } },
    /Cinder volumes have no tags/,
  );
  refused({ ...base, owner: { metadata: 'cinder.csi.openstack.org/cluster' } }, /KEY=VALUE/);
  refused({ ...base, owner: { metadata: 'k=prod' } }, /must name the cluster/);
  refused(
    { ...base, owner: { metadata: `k-${CLUSTER_MARK}=x-${CLUSTER_MARK}` } },
    /in the value, not the key/,
  );
  const vol = compileCloudRule(
    {
      ...base,
      mode: 'report-only',
      target: { openstack: 'volumes' },
      owner: { metadata: `cinder.csi.openstack.org/cluster=${CLUSTER_MARK}` },
      inUse: 'object.id in evidence.services',
    },
    'test',
  );
  assert.ok(vol.owner.owns({ metadata: { 'cinder.csi.openstack.org/cluster': 'prod-1' } }, 'prod-1'));
  assert.not.ok(vol.owner.owns({ metadata: { 'cinder.csi.openstack.org/cluster': 'prod-10' } }, 'prod-1'));
  assert.not.ok(vol.owner.owns({ metadata: {} }, 'prod-1'));
  refused({ ...base, mode: 'delete-later' }, /mode/);
  refused({ ...base, inUse: 'true' }, /reads neither the object nor the evidence/);
});

test('an OpenStack list as evidence: checked like the target (collection, key), named in errors, explained', () => {
  const ports = { openstack: 'ports', key: 'object.security_groups' };
  const r = compileCloudRule(
    {
      ...base,
      evidence: { ...base.evidence, ports },
      inUse: 'object.owner.service in evidence.services || object.id in evidence.ports',
    },
    'test',
  );
  assert.equal(
    r.cloudEvidence.map((e) => [e.name, e.collection]),
    [['ports', 'ports']],
  );
  assert.equal(
    r.evidence.map((e) => e.name),
    ['services'],
  );
  refused(
    { ...base, evidence: { ...base.evidence, ports: { ...ports, openstack: 'images' } } },
    /evidence\.ports\.openstack.*expected one of ports, floatingips/,
  );
  refused(
    { ...base, evidence: { ...base.evidence, ports: { ...ports, key: 'object.(' } } },
    /evidence\.ports\.key/,
  );
  refused(
    { ...base, evidence: { ...base.evidence, ports: { ...ports, labelSelector: 'a=b' } } },
    /evidence\.ports.*labelSelector/,
  );
  refused(
    { ...base, inUse: 'object.owner.service in evidence.services || object.id in evidence.fips' },
    /reads evidence\.fips, which the rule does not declare/,
  );
  const out = twopass([
    'rules',
    'check',
    '--output',
    'json',
    write({ ...base, evidence: { ...base.evidence, ports }, inUse: 'object.id in evidence.ports' }),
  ]);
  assert.is(out.code, 0, out.err);
  assert.match(out.out, /OpenStack Neutron ports of the project/);
});

test('the pattern is anchored, the cluster quoted into it; its named groups are the owner', () => {
  const r = compileCloudRule(base, 'test');
  const own = (description: string, cluster = 'c.1') => r.owner.owns({ description }, cluster);
  assert.equal(own('Floating IP for ns/web from cluster c.1'), { service: 'ns/web' });
  assert.is(own('Floating IP for ns/web from cluster cx1'), null, 'the dot is quoted');
  assert.is(own('Floating IP for ns/web from cluster c.1-b'), null, 'anchored at the end');
  assert.is(own('Old Floating IP for ns/web from cluster c.1'), null, 'anchored at the start');
  const tagged = compileCloudRule({ ...base, owner: { tag: `kube-${CLUSTER_MARK}` } }, 'test');
  assert.equal(tagged.owner.owns({ tags: ['kube-prod'] }, 'prod'), {});
  assert.is(tagged.owner.owns({ tags: ['kube-prod-2'] }, 'prod'), null);
  assert.is(tagged.owner.serverTag('prod'), 'kube-prod', 'a tag is asked of the server too');
});

test('the shipped pack: its ownership matches what cloud-provider-openstack writes, and only for its cluster', async () => {
  const cfg = resolveConfig({ rules: [{ file: FIP_PACK }] }, 'test');
  const fn = functionsOf(cfg).find((f) => f.name === 'cpo-floating-ips');
  assert.ok(fn, 'the pack loads as a function');
  assert.is(fn.defaults.enabled, false, 'off until enabled with its project and cluster');
  const { loadAnyRuleFile } = await import('../../shared/rules/registry.ts');
  const pack = loadAnyRuleFile(FIP_PACK)[0] as ReturnType<typeof compileCloudRule>;
  assert.equal(pack.owner.owns({ description: fipDescription('shop/web') }, CLUSTER), {
    service: 'shop/web',
  });
  assert.is(pack.owner.owns({ description: fipDescription('shop/web', 'prod-2') }, CLUSTER), null);
});

test("a server that ignores project_id (or an admin's token): another project's floating IP is still never judged", async () => {
  const pack = (await import('../../shared/rules/registry.ts')).loadAnyRuleFile(FIP_PACK)[0] as ReturnType<
    typeof compileCloudRule
  >;
  const { cloudRuleFunction } = await import('../../shared/rules/cloud-function.ts');
  const { WorldReader } = await import('../../shared/cli/rules.ts');
  const fip = (id: string, project: string) => ({
    id,
    project_id: project,
    revision_number: 1,
    tags: [],
    port_id: null,
    description: fipDescription('shop/gone'),
  });
  const all = [fip('mine', 'p-1'), fip('theirs', 'p-2')];
  const notes: string[] = [];
  const fn = cloudRuleFunction(pack);
  const snap = await fn.observe(
    {
      kube: new WorldReader([]),
      neutron: {
        // every project's, whatever was asked
        listFloatingIps: async () => ({ items: all, pages: 1 }),
        listPorts: async () => ({ items: [], pages: 1 }),
        listSecurityGroups: async () => ({ items: [], pages: 1 }),
        getPort: async () => undefined,
        getFloatingIp: async () => undefined,
        getSecurityGroup: async () => undefined,
      },
    },
    {
      now: Date.now(),
      signal: new AbortController().signal,
      settings: parsed(fn, settingsFor(pack, 'p-1')),
      note: (event: string, fields: Record<string, unknown>) =>
        notes.push(`${event} ${JSON.stringify(fields)}`),
    },
  );
  assert.equal(
    snap.targets.map((t) => t.key),
    ['mine'],
  );
  assert.ok(notes.some((n) => n.startsWith('targets.not-owned') && n.includes('"count":1')));
});

test('`rules check` says how a cloud rule deletes; `rules manifests` runs it with the OpenStack Secret and lists only its evidence', () => {
  const check = twopass(['rules', 'check', FIP_PACK, '--output', 'table']);
  assert.is(check.code, 0, check.err);
  assert.match(check.out, /targets: +OpenStack Neutron floatingips/);
  assert.match(check.out, /delete: +DELETE with If-Match: revision_number=<observed>/);
  assert.match(check.out, /fingerprint: id, revision_number/);
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cloud-rule-'));
  writeFileSync(join(dir, 'r.yaml'), stringify({ ...base, mode: 'report-only' }));
  const ro = twopass(['rules', 'check', join(dir, 'r.yaml'), '--output', 'table']);
  assert.match(ro.out, /delete: +never: a report-only rule/);
  const m = twopass(['rules', 'manifests', FIP_PACK]);
  assert.is(m.code, 0, m.err);
  assert.match(m.out, /secretName: twopass-openstack/);
  assert.match(m.out, /name: OS_CLOUD\n +value: openstack/);
  const rbac = twopass(['rules', 'rbac', FIP_PACK]);
  assert.is(rbac.code, 0, rbac.err);
  assert.match(rbac.out, /resources:\n +- services\n +verbs:\n +- list\n/);
  assert.not.match(rbac.out, /delete/, 'the targets are in OpenStack: no Kubernetes delete');
  const lb = twopass([
    'rules',
    'check',
    join(FIP_PACK, '../../cpo-load-balancers/rule.yaml'),
    '--output',
    'table',
  ]);
  assert.match(
    lb.out,
    /delete: +DELETE without a precondition \(the API offers none\): the re-check on a fresh read is the last guard/,
  );
  assert.match(lb.out, /fingerprint: id, updated_at, provisioning_status/);
});

test('`rules test` checks each cloud pack against its world file, and exits 1 on a decision that differs', () => {
  for (const pack of [
    'cpo-floating-ips',
    'cpo-security-groups',
    'cinder-csi-volumes',
    'cpo-load-balancers',
  ]) {
    const dir = join(FIP_PACK, '../..', pack);
    const r = twopass(['rules', 'test', join(dir, 'rule.yaml'), join(dir, 'world.yaml'), '--output', 'json']);
    assert.is(r.code, 0, `${pack}: ${r.out}${r.err}`);
    const decisions = r.out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { ok?: boolean; decision: string });
    assert.ok(decisions.length >= 3, `${pack} decides its targets`);
    assert.ok(
      decisions.every((d) => d.ok === true),
      `${pack}: every target expected and met`,
    );
    for (const want of ['in-use', 'unused', 'indeterminate'])
      assert.ok(
        decisions.some((d) => d.decision === want),
        `${pack}: a target ${want}`,
      );
  }
  // a world that expects otherwise
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cloud-world-'));
  const world = readFileSync(join(FIP_PACK, '../world.yaml'), 'utf8').replace(
    'twopass.io/expect: in-use',
    'twopass.io/expect: unused',
  );
  writeFileSync(join(dir, 'world.yaml'), world);
  const bad = twopass(['rules', 'test', FIP_PACK, join(dir, 'world.yaml'), '--output', 'table']);
  assert.is(bad.code, 1);
  assert.match(bad.out, /MISMATCH in-use/);
  // a world without its Project
  writeFileSync(
    join(dir, 'none.yaml'),
    world.replace(/kind: Project[\s\S]*?---/, 'kind: Namespace\nmetadata: { name: x }\n---'),
  );
  const none = twopass(['rules', 'test', FIP_PACK, join(dir, 'none.yaml')]);
  assert.is(none.code, 2);
  assert.match(none.err, /needs one `kind: Project`/);
});

test("ownership that cannot be borrowed: a run with cloud-provider-openstack's default cluster name, or without the pack's acknowledgement, is refused (exit 2) and says why and what to set", () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cloud-refusals-'));
  const run = (pack: string, settings: Record<string, unknown>) => {
    const cfg = join(dir, `${pack}.yaml`);
    writeFileSync(
      cfg,
      stringify({
        rules: [{ file: join(FIP_PACK, '../..', pack, 'rule.yaml') }],
        functions: { [pack]: { enabled: true, settings: { projectId: 'p-1', ...settings } } },
      }),
    );
    // no kubeconfig and no cloud: a run that passes the settings stops at the connection instead
    return twopass(['run', pack, '--config', cfg], { KUBECONFIG: join(dir, 'none'), OS_CLOUD: 'none' });
  };
  for (const pack of ['cpo-load-balancers', 'cpo-security-groups', 'cinder-csi-volumes']) {
    const shared = run(pack, { cluster: 'kubernetes' });
    assert.is(shared.code, 2, shared.err);
    assert.match(
      shared.err,
      new RegExp(
        `functions\\.${pack}\\.settings\\.cluster\`: \`kubernetes\` is cloud-provider-openstack's default --cluster-name`,
      ),
    );
    assert.match(shared.err, /clusterNameIsUnique: true/);
    const said = run(pack, { cluster: 'kubernetes', clusterNameIsUnique: true });
    assert.not.match(said.err, /settings/, `${pack}: said, the name is taken: ${said.err}`);
    const own = run(pack, { cluster: 'prod-1' });
    assert.not.match(own.err, /settings/, `${pack}: a name of its own: ${own.err}`);
  }
  const unmarked = run('cpo-floating-ips', { cluster: 'prod-1' });
  assert.is(unmarked.code, 2, unmarked.err);
  assert.match(
    unmarked.err,
    /settings\.keptFloatingIpsMarked`: this rule runs only once `keptFloatingIpsMarked: true` is set/,
  );
  assert.match(unmarked.err, /keep-floatingip/);
  const marked = run('cpo-floating-ips', { cluster: 'prod-1', keptFloatingIpsMarked: true });
  assert.not.match(marked.err, /settings/, marked.err);
  const check = twopass(['rules', 'check', FIP_PACK, '--output', 'table']);
  assert.match(check.out, /requires: +functions\.cpo-floating-ips\.settings\.keptFloatingIpsMarked: true/);
});

test('a rule may not name an acknowledgement after a setting every cloud rule has', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cloud-ack-'));
  writeFileSync(join(dir, 'r.yaml'), stringify({ ...base, acknowledge: { cluster: 'why' } }));
  const r = twopass(['rules', 'check', join(dir, 'r.yaml')]);
  assert.is(r.code, 2, r.err);
  assert.match(r.err, /`acknowledge\.cluster`: `cluster` is a setting of every cloud rule/);
});

test('`release` is for security groups only, names an OpenStack ports list, and its condition is checked like any other', () => {
  const ports = { openstack: 'ports', key: 'has(object.security_groups) ? object.security_groups : []' };
  const sg = {
    ...base,
    target: { openstack: 'security-groups' },
    owner: { description: `SG for (?P<service>\\S+) in ${CLUSTER_MARK}` },
    evidence: { ...base.evidence, ports },
  };
  refused(
    { ...base, evidence: { ...base.evidence, ports }, release: { evidence: 'ports', when: 'true' } },
    /`release`: only a security group is taken off its ports before its delete \(the target is floatingips\)/,
  );
  refused(
    { ...sg, release: { evidence: 'services', when: 'true' } },
    /`release.evidence`: services is not an evidence list of `openstack: ports`/,
  );
  refused(
    { ...sg, release: { evidence: 'ports', when: 'object.device_id in evidence.nodes' } },
    /`release.when`: reads evidence.nodes, which the rule does not declare/,
  );
  refused({ ...sg, release: { evidence: 'ports', when: '"yes"' } }, /`release.when`/);
  const ok = compileCloudRule(
    { ...sg, release: { evidence: 'ports', when: 'object.device_id != ""' } },
    'test',
  );
  assert.ok(ok.release, 'compiled');
  assert.ok(
    ok.cloudEvidence.find((e) => e.name === 'ports')?.readsValues,
    'the ports list keeps its objects: the delete reads them',
  );
});

test.run();
