/**
 * Rules without a cluster: the schema, compile errors that name the rule, the field and
 * the position, the ownership laws, the registry (config inline, by file, TWOPASS_RULES),
 * and the `twopass rules` commands as a user runs them.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { parseAllDocuments, stringify } from 'yaml';
import { functionsOf } from '../../shared/catalogue.ts';
import { resolveConfig } from '../../shared/config.ts';
import { RUNTIME_RULES } from '../../shared/contract/access.ts';
import { ConfigError } from '../../shared/errors.ts';
import { packageRoot } from '../../shared/paths.ts';
import { ruleAccess } from '../../shared/rules/access.ts';
import { readsOnlyMetadata } from '../../shared/rules/cel.ts';
import { identify, judge } from '../../shared/rules/function.ts';
import { builtInGroup } from '../../shared/rules/ownership.ts';
import { compileRule } from '../../shared/rules/rule.ts';
import { twopass } from '../helpers/cli.ts';
import { widgetsRule } from './widgets.ts';

const ROOT = packageRoot();
const PACKS = ['cilium-endpoints', 'cilium-identities', 'danm-eps'];
const packFile = (p: string) => join(ROOT, 'functions/rules', p, 'rule.yaml');

const base = widgetsRule;
const withRule = (change: Record<string, unknown>) => ({ ...base(), ...change });
const refused = (doc: unknown, ...parts: (string | RegExp)[]) => {
  try {
    compileRule(doc, 'test');
  } catch (err) {
    assert.instance(err, ConfigError);
    for (const p of parts)
      if (typeof p === 'string')
        assert.ok((err as Error).message.includes(p), `${(err as Error).message} ∌ ${p}`);
      else assert.match((err as Error).message, p);
    return (err as Error).message;
  }
  assert.unreachable(`accepted: ${JSON.stringify(doc)}`);
  return '';
};

const compileErrors = suite('rules: compile errors name the rule, the field and the position');

compileErrors('a syntax error: rule, field, line and column', () => {
  refused(
    withRule({ inUse: 'object.spec.podUID in\n  evidence.pods &&' }),
    'rule widgets',
    '`inUse`',
    /line 2, column \d+/,
  );
});
compileErrors('a type error and an unknown variable', () => {
  refused(withRule({ inUse: '1 + "a" == 2' }), 'rule widgets: `inUse`', 'overload');
  refused(withRule({ inUse: 'pod.metadata.uid in evidence.pods' }), '`inUse`', 'Unknown variable: pod');
  // the key of evidence sees only `object`
  refused(
    withRule({
      evidence: { pods: { ...(base().evidence as { pods: object }).pods, key: 'evidence.pods' } },
    }),
    '`evidence.pods.key`',
    'Unknown variable: evidence',
  );
});
compileErrors('a result of the wrong type', () => {
  refused(withRule({ inUse: '"yes"' }), '`inUse`', 'type string; expected bool');
  refused(withRule({ indeterminate: 'true' }), '`indeterminate`', 'expected string or null');
});
compileErrors('evidence read but not declared', () => {
  refused(
    withRule({ inUse: 'object.metadata.uid in evidence.nodes' }),
    'reads evidence.nodes',
    'declared: pods',
  );
});
compileErrors('schema: unknown keys, missing fields, bad names', () => {
  refused(withRule({ inuse: 'true' }), '`inuse`', 'unknown key');
  const { inUse: _i, ...noInUse } = base();
  refused(noInUse, '`inUse`');
  refused(withRule({ name: 'Bad_Name' }), '`name`');
  refused(withRule({ target: { ...(base().target as object), version: 'one' } }), '`target.version`');
  refused(withRule({ owner: { group: 'example.com', label: 'a' } }), '`owner`', 'exactly one mark');
});

const ownership = suite('rules: ownership stays narrow');

// Forbidden kinds: a property in properties.test.ts (every mark, opt-in and scope).
ownership('other built-in kinds need allowBuiltIn and a label, annotation or ownerKind mark', () => {
  const svc = { group: '', version: 'v1', resource: 'services', kind: 'Service', namespaced: true };
  refused(withRule({ target: svc, owner: { label: 'app=x' } }), 'allowBuiltIn: true');
  refused(withRule({ target: svc, owner: { group: '' }, allowBuiltIn: true }), '`owner.group`');
  const ok = compileRule(withRule({ target: svc, owner: { label: 'team=net' }, allowBuiltIn: true }), 't');
  assert.is(ok.target.labelSelector, 'team=net', 'a label mark is also the list selector');
  const meta = (labels: Record<string, string>) => ({
    metadata: { name: 'a', uid: 'u', resourceVersion: '1', labels },
  });
  assert.ok(ok.owner.owns(meta({ team: 'net' })));
  assert.not.ok(ok.owner.owns(meta({ team: 'db' })), 'the mark is checked on each object too');
  const byOwner = compileRule(
    withRule({ target: svc, owner: { ownerKind: 'Gateway' }, allowBuiltIn: true }),
    't',
  );
  assert.not.ok(byOwner.owner.owns(meta({})));
  assert.ok(
    byOwner.owner.owns({
      metadata: { name: 'a', uid: 'u', resourceVersion: '1', ownerReferences: [{ kind: 'Gateway' }] },
    }),
  );
});
ownership('the owner group must be the target group; built-in groups are known by name', () => {
  refused(withRule({ owner: { group: 'other.com' } }), '`owner.group`', 'is not the target');
  assert.ok(builtInGroup('') && builtInGroup('apps') && builtInGroup('networking.k8s.io'));
  assert.not.ok(builtInGroup('danm.k8s.io'), "DANM's group is a custom resource's");
  assert.not.ok(builtInGroup('cilium.io'));
});

const behaviour = suite('rules: evaluation');

behaviour('an expression that errors or reads a missing field makes the target indeterminate', () => {
  const r = compileRule(base(), 't');
  const pods = new Map([['p1', [{}]]]);
  assert.equal(judge(r, { spec: { podUID: 'p1' } }, { pods }), { used: true });
  assert.equal(judge(r, { spec: { podUID: 'p2' } }, { pods }), { unused: true });
  const missing = judge(r, { spec: {} }, { pods });
  assert.ok(
    'indeterminate' in missing && missing.indeterminate.includes('No such key: podUID'),
    JSON.stringify(missing),
  );
  const dyn = compileRule(withRule({ inUse: 'object.spec.flag' }), 't');
  const notBool = judge(dyn, { spec: { flag: 'yes' } }, { pods });
  assert.ok('indeterminate' in notBool && notBool.indeterminate.includes('not true or false'));
});
behaviour(
  'identity: the UID by default; a sticky name when the rule says so, with the UID still in the fingerprint',
  () => {
    const o = {
      metadata: { name: 'web-0', namespace: 'shop', uid: 'u1', resourceVersion: '7' },
      spec: { podUID: 'p' },
    };
    const byUid = identify(compileRule(base(), 't'), o, o);
    assert.equal(byUid, { key: 'u1', fingerprint: 'u1|7' });
    const byName = compileRule(
      withRule({
        identity: 'object.metadata.namespace + "/" + object.metadata.name',
        fingerprint: ['object.spec.podUID'],
      }),
      't',
    );
    assert.equal(identify(byName, o, o), { key: 'shop/web-0', fingerprint: 'u1|7|"p"' });
    const recreated = { ...o, metadata: { ...o.metadata, uid: 'u2' } };
    const again = identify(byName, recreated, recreated);
    assert.ok(
      'key' in again && again.key === 'shop/web-0' && again.fingerprint !== 'u1|7|"p"',
      'same key, new fingerprint',
    );
    const broken = compileRule(withRule({ identity: 'object.metadata.labels.owner' }), 't');
    const e = identify(broken, o, o);
    assert.ok('error' in e && e.error.startsWith('identity: '), JSON.stringify(e));
  },
);
behaviour('whole numbers are CEL ints, as in Kubernetes', () => {
  const r = compileRule(withRule({ inUse: 'object.spec.replicas + 1 > 2' }), 't');
  assert.equal(judge(r, { spec: { replicas: 2n } }, {}), { used: true });
});
behaviour('metadata-only lists when the expressions read only metadata', () => {
  assert.ok(readsOnlyMetadata(['object.metadata.uid in evidence.pods', 'has(object.metadata.labels)']));
  assert.not.ok(readsOnlyMetadata(['object.spec.x']));
  assert.not.ok(readsOnlyMetadata(['object["spec"]']));
  assert.ok(
    readsOnlyMetadata(['x.object.spec == "object.spec"']),
    'a field named object and strings are not the variable',
  );
  const r = compileRule(base(), 't');
  assert.not.ok(r.target.metadataOnly, 'inUse reads object.spec');
  assert.ok(
    r.evidence[0]!.metadataOnly,
    'the pods key reads metadata only, and no condition reads pod objects',
  );
  const reads = compileRule(
    withRule({ inUse: 'evidence.pods[object.metadata.uid][0].spec.nodeName != ""' }),
    't',
  );
  assert.not.ok(reads.evidence[0]!.metadataOnly, 'a condition reads the pod objects');
});

const packs = suite('rules: the packs shipped');

packs('each pack compiles, has a README and a world whose expectations hold', () => {
  for (const p of PACKS) {
    assert.ok(existsSync(join(ROOT, 'functions/rules', p, 'README.md')), `${p} has a README`);
    const r = twopass([
      'rules',
      'test',
      packFile(p),
      join(ROOT, 'functions/rules', p, 'world.yaml'),
      '--output',
      'json',
    ]);
    assert.is(r.code, 0, `${p}: ${r.err}`);
    const rows = r.json();
    assert.ok(rows.length >= 3, `${p}: ${r.out}`);
    assert.ok(
      rows.every((x) => x.ok === true),
      `${p}: ${r.out}`,
    );
    assert.ok(new Set(rows.map((x) => x.decision)).size >= 2, `${p}: the world shows more than one decision`);
    const check = twopass(['rules', 'check', packFile(p)]);
    assert.is(check.code, 0, check.err);
    assert.match(check.out, new RegExp(`rule ${p}: ok`));
  }
});

const cli = suite('rules: the commands');

cli('rules test: a decision that differs from twopass.io/expect exits 1 and says so', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-rules-'));
  const world = join(dir, 'world.yaml');
  writeFileSync(
    world,
    stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: [
        { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'a', uid: 'u1' } },
        {
          apiVersion: 'cilium.io/v2',
          kind: 'CiliumEndpoint',
          metadata: {
            name: 'p',
            namespace: 'a',
            annotations: { 'twopass.io/expect': 'unused' },
            ownerReferences: [{ kind: 'Pod', uid: 'u1' }],
          },
        },
      ],
    }),
  );
  const r = twopass(['rules', 'test', packFile('cilium-endpoints'), world, '--output', 'table']);
  assert.is(r.code, 1);
  assert.match(r.out, /MISMATCH in-use +CiliumEndpoint a\/p .*\(expected unused\)/);
  assert.match(r.err, /1 decision\(s\) differ/);
});
cli(
  'rules check: a broken rule file exits 2 with one line naming the rule, the field and the position',
  () => {
    const dir = mkdtempSync(join(tmpdir(), 'twopass-rules-'));
    const f = join(dir, 'bad.yaml');
    writeFileSync(f, stringify(withRule({ inUse: 'object.spec.podUID in evidence.pods &&' })));
    const r = twopass(['rules', 'check', f]);
    assert.is(r.code, 2);
    assert.match(r.err, /rule widgets: `inUse`: line 1, column \d+: /);
    assert.not.match(r.err, /\n\s+at /, 'no stack trace');
    assert.is(twopass(['rules', 'check']).code, 2, 'usage');
    assert.is(twopass(['rules', 'check', join(dir, 'missing.yaml')]).code, 2);
    assert.is(twopass(['rules', 'frobnicate', f]).code, 2);
  },
);
cli(
  'rules rbac: list on targets and evidence, get and delete on targets, what every run needs, nothing else',
  () => {
    const r = twopass(['rules', 'rbac', packFile('cilium-identities')]);
    assert.is(r.code, 0, r.err);
    const docs = parseAllDocuments(r.out).map((d) => d.toJS() as Record<string, unknown>);
    assert.equal(
      docs.map((d) => d.kind),
      ['ClusterRole', 'ClusterRoleBinding'],
    );
    assert.equal(docs[0]!.rules, [
      { apiGroups: ['cilium.io'], resources: ['ciliumidentities'], verbs: ['list', 'get', 'delete'] },
      { apiGroups: ['cilium.io'], resources: ['ciliumendpoints'], verbs: ['list'] },
      { apiGroups: ['cilium.io'], resources: ['ciliumendpointslices'], verbs: ['list'] },
      ...RUNTIME_RULES,
    ]);
    // evidence of the target's own resource adds no verb beyond list
    const self = compileRule(
      withRule({
        evidence: {
          same: {
            group: 'example.com',
            version: 'v1',
            resource: 'widgets',
            kind: 'Widget',
            namespaced: true,
            key: 'object.metadata.name',
          },
        },
        inUse: 'object.metadata.name in evidence.same',
      }),
      't',
    );
    assert.equal(ruleAccess(self).cluster, [
      { apiGroups: ['example.com'], resources: ['widgets'], verbs: ['list', 'get', 'delete'] },
    ]);
  },
);
cli('rules manifests: its own CronJob runs the rule from its ConfigMap, with the RBAC above', () => {
  const r = twopass([
    'rules',
    'manifests',
    packFile('cilium-endpoints'),
    '--namespace',
    'ops',
    '--image',
    'reg/twopass:1',
  ]);
  assert.is(r.code, 0, r.err);
  const docs = parseAllDocuments(r.out).map(
    (d) => d.toJS() as { kind: string; metadata: { name: string }; [k: string]: unknown },
  );
  const job = docs.find((d) => d.kind === 'CronJob') as unknown as {
    metadata: { namespace: string };
    spec: {
      schedule: string;
      jobTemplate: {
        spec: {
          template: {
            spec: {
              containers: { image: string; args: string[]; env: { name: string; value?: string }[] }[];
            };
          };
        };
      };
    };
  };
  assert.is(job.metadata.namespace, 'ops');
  assert.is(job.spec.schedule, '*/5 * * * *', "the rule's schedule");
  const c = job.spec.jobTemplate.spec.template.spec.containers[0]!;
  assert.is(c.image, 'reg/twopass:1');
  assert.equal(c.args.slice(0, 2), ['run', 'cilium-endpoints']);
  assert.ok(c.env.some((e) => e.name === 'TWOPASS_RULES' && e.value === '/etc/twopass-rule/rule.yaml'));
  const cm = docs.find((d) => d.kind === 'ConfigMap') as unknown as { data: Record<string, string> };
  assert.is(compileRule(parseAllDocuments(cm.data['rule.yaml']!)[0]!.toJS(), 'cm').name, 'cilium-endpoints');
});

cli(
  'README "Write your own rule": its example is the pack the sandbox runs, and its error is the one printed',
  () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Write your own rule'));
    const example = /```yaml\n([\s\S]*?)```/.exec(section)![1]!;
    assert.is(example, readFileSync(packFile('cilium-endpoints'), 'utf8'));
    const dir = mkdtempSync(join(tmpdir(), 'twopass-rules-'));
    const bad = join(dir, 'bad.yaml');
    writeFileSync(
      bad,
      stringify({
        name: 'widgets',
        description: 'w',
        target: {
          group: 'example.com',
          version: 'v1',
          resource: 'widgets',
          kind: 'Widget',
          namespaced: true,
        },
        owner: { group: 'example.com' },
        inUse: 'object.metadata.name in',
      }),
    );
    const printed = /\$ twopass rules check bad.yaml\n(.*)\n/.exec(section)![1]!;
    assert.is(twopass(['rules', 'check', bad]).err.trim(), printed);
  },
);

const registry = suite('rules: in the registry');

registry('rules load from the config inline and by file, and appear in `twopass functions`', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-rules-'));
  writeFileSync(join(dir, 'widgets.yaml'), stringify(base()));
  const cfgFile = join(dir, 'config.yaml');
  writeFileSync(
    cfgFile,
    stringify({
      rules: [{ file: 'widgets.yaml' }, { ...base(), name: 'gadgets' }],
      functions: { widgets: { grace: '30m' } },
    }),
  );
  const r = twopass(['functions', '--config', cfgFile, '--output', 'json']);
  assert.is(r.code, 0, r.err);
  const fns = r.json();
  assert.equal(
    fns.map((f) => f.name),
    ['danm-endpoints', 'whereabouts-ips', 'lbaas-ports', 'widgets', 'gadgets'],
  );
  const w = fns.find((f) => f.name === 'widgets')!;
  assert.is(
    (w.policy as { graceMs: number }).graceMs,
    30 * 60_000,
    'functions.<rule> configures it like any function',
  );
  assert.is(w.schedule, '*/10 * * * *');
});
registry('a rule that does not compile, or takes a taken name, stops the config (exit 2)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-rules-'));
  const cfgFile = join(dir, 'config.yaml');
  writeFileSync(cfgFile, stringify({ rules: [withRule({ inUse: 'object.spec.podUID in' })] }));
  const r = twopass(['functions', '--config', cfgFile]);
  assert.is(r.code, 2);
  assert.match(r.err, /rule widgets: `inUse`: line 1/);
  writeFileSync(cfgFile, stringify({ rules: [withRule({ name: 'danm-endpoints' })] }));
  const dup = twopass(['run', 'danm-endpoints', '--config', cfgFile]);
  assert.is(dup.code, 2);
  assert.match(dup.err, /a function of that name exists already/);
  writeFileSync(cfgFile, stringify({ rules: [{ file: 'nowhere.yaml' }] }));
  assert.match(twopass(['functions', '--config', cfgFile]).err, /nowhere\.yaml: cannot read/);
});
registry('TWOPASS_RULES adds rule files to the config', () => {
  const cfg = resolveConfig({}, 'defaults', { rules: PACKS.map(packFile) });
  assert.equal(
    functionsOf(cfg)
      .map((f) => f.name)
      .slice(3),
    PACKS,
  );
  const r = twopass(['functions', '--output', 'json'], {
    TWOPASS_RULES: `${packFile('danm-eps')}:${packFile('cilium-endpoints')}`,
  });
  assert.is(r.code, 0, r.err);
  assert.equal(
    r
      .json()
      .map((f) => f.name)
      .slice(3),
    ['danm-eps', 'cilium-endpoints'],
  );
});

compileErrors.run();
ownership.run();
behaviour.run();
packs.run();
cli.run();
registry.run();
