/**
 * The Helm chart (infra/helm/twopass), with helm built from the Go module proxy
 * (test/helm/build.sh): lint; a matrix of values rendered, each config accepted by twopass
 * and each workload hardened; the default install a dry run that records; RBAC identical
 * to the kustomize components'; every render accepted by the real API server
 * (server-side dry-run). Without helm the suite is reported as skipped (CI sets
 * TWOPASS_REQUIRE_HELM=1: then its absence fails).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { functionsOf } from '../../shared/catalogue.ts';
import { fileSchema, resolveConfig } from '../../shared/config.ts';
import { NAMESPACES } from '../../shared/kube/resources.ts';
import { ruleAccess } from '../../shared/rules/access.ts';
import { loadRuleFile } from '../../shared/rules/rule.ts';
import { checkFunctionsConfig } from '../../shared/runtime/settings.ts';
import { binDir } from '../cluster/cluster.ts';
import { realTarget } from '../helpers/kube-target.ts';
import { sarMatrix } from '../infra/sar-matrix.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const CHART = join(ROOT, 'infra/helm/twopass');
const HELM = join(process.env.TWOPASS_CACHE ?? join(homedir(), '.cache/twopass'), 'helm/v4.3.2/helm');
const KUBECTL = join(binDir(), 'kubectl');
const have = existsSync(HELM);
if (!have && process.env.TWOPASS_REQUIRE_HELM === '1')
  throw new Error(`helm is required (TWOPASS_REQUIRE_HELM=1) at ${HELM} (test/helm/build.sh)`);
if (!have) console.log(`  !!! no helm at ${HELM} (test/helm/build.sh): the chart suite is SKIPPED`);

type Obj = {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
  rules?: unknown[];
  roleRef?: unknown;
  subjects?: unknown[];
};

/** Values that deploy two rule packs (`@rules` in a value set below). */
const PACK_RULES = ['cilium-endpoints', 'cilium-identities'].map(
  (p) => loadRuleFile(join(ROOT, 'functions/rules', p, 'rule.yaml'))[0]!,
);
const RULES_VALUES = join(mkdtempSync(join(tmpdir(), 'twopass-helm-rules-')), 'rules.yaml');
writeFileSync(
  RULES_VALUES,
  stringify({ rules: PACK_RULES.map((r) => ({ rule: r.file, apply: false, record: true })) }),
);

const MATRIX: Record<string, string[]> = {
  default: [],
  'danm-endpoints deleting': ['functions.danm-endpoints.apply=true'],
  'lbaas-ports enabled': [
    'functions.lbaas-ports.enabled=true',
    'functions.lbaas-ports.settings.projectId=p1',
  ],
  'lbaas-ports beside a controller in its own namespace': [
    'functions.lbaas-ports.enabled=true',
    'functions.lbaas-ports.settings.projectId=p1',
    'functions.lbaas-ports.settings.controller.namespace=kube-public',
    'functions.lbaas-ports.settings.controller.deployment=lb-controller',
  ],
  'lbaas-ports with its controller decommissioned': [
    'functions.lbaas-ports.enabled=true',
    'functions.lbaas-ports.settings.projectId=p1',
    'functions.lbaas-ports.settings.controller=none',
  ],
  'the scheduler, with its ServiceMonitor and the PrometheusRule': [
    'scheduler.enabled=true',
    'monitoring.prometheusRule=true',
  ],
  'danm-endpoints sized for 300,000 pods (768Mi, heap 460 MiB), the scheduler for 1Gi': [
    'functions.danm-endpoints.resources.limits.memory=768Mi',
    'functions.danm-endpoints.heapMiB=460',
  ],
  'the Grafana dashboard for the sidecar, in the monitoring namespace': [
    'monitoring.dashboard.enabled=true',
    'monitoring.dashboard.namespace=twopass-system',
    'monitoring.dashboard.annotations.grafana_folder=twopass',
  ],
  'by digest, a Pushgateway, a Slack webhook, approval': [
    `image.digest=sha256:${'a'.repeat(64)}`,
    'monitoring.pushgateway=http://pushgateway.monitoring:9091',
    'config.notify.webhook.format=slack',
    'functions.whereabouts-ips.approval.requiredAbove=50',
  ],
  'two rule packs, each its own CronJob': ['@rules'],
  'two rule packs under the scheduler': ['@rules', 'scheduler.enabled=true'],
};

function helmTemplate(sets: string[], ns = 'twopass-system'): { yaml: string; objs: Obj[] } {
  const yaml = execFileSync(
    HELM,
    [
      'template',
      'twopass',
      CHART,
      '-n',
      ns,
      ...sets.flatMap((s) => (s === '@rules' ? ['-f', RULES_VALUES] : ['--set', s])),
    ],
    {
      encoding: 'utf8',
    },
  );
  return {
    yaml,
    objs: parseAllDocuments(yaml)
      .map((d) => d.toJS() as Obj)
      .filter(Boolean),
  };
}

function kustomize(overlay: string): Obj[] {
  const yaml = execFileSync(KUBECTL, ['kustomize', join(ROOT, 'infra/kustomize/overlays', overlay)], {
    encoding: 'utf8',
  });
  return parseAllDocuments(yaml).map((d) => d.toJS() as Obj);
}

const test = suite('the Helm chart');
const it = have ? test : test.skip;

it('helm lint passes', () => {
  const r = spawnSync(HELM, ['lint', '--strict', CHART], { encoding: 'utf8' });
  assert.is(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
});

for (const [name, sets] of Object.entries(MATRIX))
  it(`${name}: the config is one twopass accepts; every workload is hardened`, () => {
    const { objs } = helmTemplate(sets);
    const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'twopass-config')!;
    const raw = fileSchema.parse(parse(cm.data!['config.yaml']!));
    const cfg = resolveConfig(raw, 'chart');
    checkFunctionsConfig(cfg.functions, functionsOf(cfg), 'chart');
    if (sets.includes('@rules'))
      assert.equal(
        functionsOf(cfg)
          .map((f) => f.name)
          .slice(3),
        PACK_RULES.map((r) => r.name),
        'the rules are in the config',
      );
    const pods = objs.flatMap((o) => {
      if (o.kind === 'CronJob') {
        const s = o.spec as {
          concurrencyPolicy: string;
          jobTemplate: {
            spec: { backoffLimit: number; activeDeadlineSeconds: number; template: { spec: unknown } };
          };
        };
        assert.is(s.concurrencyPolicy, 'Forbid');
        assert.is(s.jobTemplate.spec.backoffLimit, 0);
        assert.ok(s.jobTemplate.spec.activeDeadlineSeconds > 0);
        return [s.jobTemplate.spec.template.spec];
      }
      if (o.kind === 'Deployment') return [(o.spec as { template: { spec: unknown } }).template.spec];
      return [];
    }) as {
      securityContext: Record<string, unknown>;
      containers: { image: string; securityContext: Record<string, unknown> }[];
    }[];
    assert.ok(pods.length > 0);
    for (const p of pods) {
      assert.is(p.securityContext.runAsNonRoot, true);
      assert.equal(p.securityContext.seccompProfile, { type: 'RuntimeDefault' });
      const c = p.containers[0]!;
      assert.is(c.securityContext.readOnlyRootFilesystem, true);
      assert.is(c.securityContext.allowPrivilegeEscalation, false);
      assert.equal(c.securityContext.capabilities, { drop: ['ALL'] });
      if (sets.some((s) => s.startsWith('image.digest='))) assert.match(c.image, /^twopass@sha256:a{64}$/);
      else assert.is(c.image, 'twopass:0.1.0');
    }
    if (sets.includes('scheduler.enabled=true'))
      assert.equal(
        objs.filter((o) => o.kind === 'CronJob'),
        [],
        'the scheduler replaces the CronJobs',
      );
  });

it("a rule's ClusterRole is what `twopass rules rbac` says, plus the Events of its deletions and kube-system's UID (a report's cluster); its CronJob runs it", () => {
  const { objs } = helmTemplate(['@rules']);
  const key = (r: unknown) => JSON.stringify(r);
  for (const rule of PACK_RULES) {
    const role = objs.find((o) => o.kind === 'ClusterRole' && o.metadata.name === `twopass-${rule.name}`)!;
    assert.equal(
      (role.rules ?? []).map(key).sort(),
      [
        ...ruleAccess(rule).cluster,
        { apiGroups: [''], resources: ['events'], verbs: ['create'] },
        { apiGroups: [''], resources: ['namespaces'], resourceNames: ['kube-system'], verbs: ['get'] },
      ]
        .map(key)
        .sort(),
      rule.name,
    );
    const job = objs.find((o) => o.kind === 'CronJob' && o.metadata.name === `twopass-${rule.name}`)!;
    const spec = job.spec as {
      schedule: string;
      jobTemplate: { spec: { template: { spec: { containers: { args: string[] }[] } } } };
    };
    assert.is(spec.schedule, rule.defaults.schedule, "the rule's own schedule");
    assert.equal(spec.jobTemplate.spec.template.spec.containers[0]!.args.slice(0, 2), ['run', rule.name]);
  }
  const sched = helmTemplate(['@rules', 'scheduler.enabled=true']).objs;
  for (const rule of PACK_RULES)
    assert.ok(
      sched.some(
        (o) => o.kind === 'ClusterRoleBinding' && o.metadata.name === `twopass-scheduler-${rule.name}`,
      ),
      "the scheduler is bound to each rule's ClusterRole",
    );
});

it('a cloud rule in values.rules is refused in one line that says how to deploy it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-helm-cloud-'));
  const values = join(dir, 'values.yaml');
  writeFileSync(
    values,
    stringify({
      rules: [
        { rule: parse(readFileSync(join(ROOT, 'functions/rules/cpo-floating-ips/rule.yaml'), 'utf8')) },
      ],
    }),
  );
  const r = spawnSync(HELM, ['template', 'twopass', CHART, '-f', values], { encoding: 'utf8' });
  assert.is.not(r.status, 0);
  assert.match(r.stderr, /rule cpo-floating-ips targets OpenStack .*`twopass rules manifests`/);
});

it('the default install is a dry run that records, for every enabled function', () => {
  const { objs } = helmTemplate([]);
  const cfg = resolveConfig(
    fileSchema.parse(parse(objs.find((o) => o.metadata.name === 'twopass-config')!.data!['config.yaml']!)),
    'chart',
  );
  const enabled = Object.entries(cfg.functions).filter(([, f]) => f.enabled);
  assert.equal(enabled.map(([n]) => n).sort(), ['danm-endpoints', 'whereabouts-ips']);
  for (const [n, f] of enabled) {
    assert.is(f.apply, false, `${n}: dry run`);
    assert.is(f.record, true, `${n}: records`);
  }
  assert.equal(
    objs
      .filter((o) => o.kind === 'CronJob')
      .map((o) => o.metadata.name)
      .sort(),
    ['twopass-danm-endpoints', 'twopass-whereabouts-ips'],
  );
});

it('RBAC: the chart grants exactly what the kustomize components grant, function by function', () => {
  const chart = helmTemplate(MATRIX['lbaas-ports enabled']!).objs;
  const kust = [...kustomize('dry-run'), ...kustomize('lbaas-ports')];
  const rbacOf = (objs: Obj[], fn: string) => {
    const pick = (kind: string, name: string) => {
      const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
      assert.ok(o, `${kind} ${name}`);
      return { namespace: o.metadata.namespace, rules: o.rules, roleRef: o.roleRef, subjects: o.subjects };
    };
    return {
      sa: pick('ServiceAccount', `twopass-${fn}`).namespace,
      role: pick('Role', `twopass-${fn}-state`),
      roleBinding: pick('RoleBinding', `twopass-${fn}-state`),
      clusterRole: pick('ClusterRole', `twopass-${fn}`),
      clusterRoleBinding: pick('ClusterRoleBinding', `twopass-${fn}`),
    };
  };
  for (const fn of ['danm-endpoints', 'whereabouts-ips', 'lbaas-ports'])
    assert.equal(rbacOf(chart, fn), rbacOf(kust, fn), fn);
  // lbaas-ports reads the ch-k8s-lbaas controller where it runs: kube-system unless told
  const ctl = (objs: Obj[]) =>
    objs
      .filter((o) => /^Role(Binding)?$/.test(o.kind) && o.metadata.name === 'twopass-lbaas-ports-controller')
      .map((o) => ({ kind: o.kind, ns: o.metadata.namespace, rules: o.rules, subjects: o.subjects }));
  assert.equal(ctl(chart), ctl(kust));
  assert.equal(
    ctl(chart).map((o) => o.ns),
    ['kube-system', 'kube-system'],
  );
  assert.equal(
    ctl(helmTemplate(MATRIX['lbaas-ports beside a controller in its own namespace']!).objs).map((o) => o.ns),
    ['kube-public', 'kube-public'],
  );
  assert.equal(ctl(helmTemplate(MATRIX['lbaas-ports with its controller decommissioned']!).objs), []);
  // and nothing else is granted
  const grants = (objs: Obj[]) =>
    objs
      .filter((o) => /Role(Binding)?$/.test(o.kind) && !o.metadata.name.startsWith('twopass-scheduler'))
      .map((o) => `${o.kind}/${o.metadata.name}`)
      .sort();
  assert.equal(grants(chart), grants(kust));
});

it("no template names a function: each one's RBAC, Roles elsewhere and OpenStack Secret come from files/access.yaml; the scheduler gets them too", () => {
  const templates = readdirSync(join(CHART, 'templates'))
    .map((f) => readFileSync(join(CHART, 'templates', f), 'utf8'))
    .join('\n')
    // comments may give an example
    .replace(/\{\{-?\s*\/\*[\s\S]*?\*\/\s*-?\}\}/g, '');
  for (const fn of ['danm-endpoints', 'whereabouts-ips', 'lbaas-ports'])
    assert.not.ok(templates.includes(fn), `${fn} is named in a template`);
  const objs = helmTemplate(['scheduler.enabled=true', 'functions.lbaas-ports.enabled=true']).objs;
  const ctl = objs.find(
    (o) => o.kind === 'RoleBinding' && o.metadata.name === 'twopass-scheduler-lbaas-ports-controller',
  );
  assert.is(ctl?.metadata.namespace, 'kube-system', 'the scheduler reads the controller where it runs');
  const dep = JSON.stringify(objs.find((o) => o.kind === 'Deployment')?.spec);
  assert.match(
    dep,
    /"secretName":"twopass-openstack"/,
    'and has the OpenStack credentials lbaas-ports needs',
  );
  assert.match(dep, /OS_CLIENT_CONFIG_FILE/);
  const without = JSON.stringify(
    helmTemplate(['scheduler.enabled=true']).objs.find((o) => o.kind === 'Deployment'),
  );
  assert.not.match(without, /openstack/, 'none without a function that needs them');
});

it("the heap cap per function and for the scheduler: NODE_OPTIONS from heapMiB, none by default (the image's), and a cap the memory limit cannot hold is refused", () => {
  const env = (o: Obj | undefined) =>
    ((o?.spec as Record<string, unknown> | undefined) &&
      JSON.stringify(o!.spec).match(/"name":"NODE_OPTIONS","value":"([^"]+)"/)?.[1]) ||
    undefined;
  const cron = (objs: Obj[], fn: string) =>
    objs.find((o) => o.kind === 'CronJob' && o.metadata.name === `twopass-${fn}`);
  assert.is(env(cron(helmTemplate([]).objs, 'danm-endpoints')), undefined, "the image's own cap by default");
  const big = helmTemplate([
    'functions.danm-endpoints.resources.limits.memory=768Mi',
    'functions.danm-endpoints.heapMiB=460',
  ]).objs;
  assert.is(env(cron(big, 'danm-endpoints')), '--max-old-space-size=460 --max-semi-space-size=8');
  assert.is(env(cron(big, 'whereabouts-ips')), undefined, 'only the function that asked');
  const sched = helmTemplate([
    'scheduler.enabled=true',
    'scheduler.resources.limits.memory=1Gi',
    'scheduler.heapMiB=600',
  ]).objs.find((o) => o.kind === 'Deployment');
  assert.is(env(sched), '--max-old-space-size=600 --max-semi-space-size=8');
  assert.match(JSON.stringify(sched?.spec), /"limits":\{"memory":"1Gi"\}/);
  const refused = spawnSync(
    HELM,
    ['template', 'twopass', CHART, '--set', 'functions.danm-endpoints.heapMiB=460'],
    {
      encoding: 'utf8',
    },
  );
  assert.is.not(refused.status, 0);
  assert.match(
    refused.stderr,
    /functions\.danm-endpoints: heapMiB 460 is not below 80% of the memory limit 512Mi/,
  );
});

it('the dashboard ConfigMap carries the shipped dashboard with the sidecar label (its name and value as set); none by default', () => {
  assert.not.ok(
    helmTemplate([]).objs.some((o) => o.metadata.name === 'twopass-dashboard'),
    'off by default',
  );
  const { objs } = helmTemplate([
    'monitoring.dashboard.enabled=true',
    'monitoring.dashboard.label=my_dashboards',
    'monitoring.dashboard.labelValue=yes',
    'monitoring.dashboard.namespace=monitoring',
  ]);
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'twopass-dashboard') as
    | (Obj & {
        data: Record<string, string>;
        metadata: { labels: Record<string, string>; namespace: string };
      })
    | undefined;
  assert.ok(cm);
  assert.is(cm.metadata.labels.my_dashboards, 'yes');
  assert.is(cm.metadata.namespace, 'monitoring');
  assert.equal(
    JSON.parse(cm.data['twopass.json']!),
    JSON.parse(readFileSync(join(ROOT, 'infra/monitoring/twopass-dashboard.json'), 'utf8')),
  );
});

it('the PrometheusRule carries exactly the shipped alert rules', () => {
  const { objs } = helmTemplate(['monitoring.prometheusRule=true']);
  const rule = objs.find((o) => o.kind === 'PrometheusRule')!;
  const shipped = parse(readFileSync(join(ROOT, 'infra/monitoring/alerts.yaml'), 'utf8')) as {
    groups: unknown;
  };
  assert.equal((rule.spec as { groups: unknown }).groups, shipped.groups);
});

it("every render is accepted by the real API server (server-side dry-run); the SubjectAccessReview matrix holds for the chart's RBAC", async () => {
  const t = process.env.TWOPASS_NO_REAL_CLUSTER === '1' ? undefined : await realTarget();
  if (!t) {
    console.log('  !!! no real API server: the chart is not dry-run against it');
    return;
  }
  const kube = t.client();
  try {
    if (!(await kube.get(NAMESPACES, undefined, 'twopass-system')))
      await kube.create(NAMESPACES, { metadata: { name: 'twopass-system' } });
    const dir = mkdtempSync(join(tmpdir(), 'twopass-helm-'));
    writeFileSync(join(dir, 'admin'), t.kubeconfig());
    for (const [name, sets] of Object.entries(MATRIX)) {
      const r = spawnSync(
        KUBECTL,
        [
          '--kubeconfig',
          join(dir, 'admin'),
          'apply',
          '--server-side',
          '--dry-run=server',
          '--field-manager=helm-test',
          // the kustomize suite may have installed into the same namespace (CI runs this suite
          // after it): a dry run that takes its fields over still has every object validated
          '--force-conflicts',
          '-f',
          '-',
        ],
        { input: helmTemplate(sets).yaml, encoding: 'utf8' },
      );
      assert.is(r.status, 0, `${name}: ${r.stderr}`);
      assert.match(r.stdout, /serverside-applied \(server dry run\)/);
    }
    // The chart's RBAC in place of any other (every function's objects replaced by the
    // chart's), then the SubjectAccessReview matrix the kustomize RBAC is held to.
    const rbac = helmTemplate(MATRIX['lbaas-ports enabled']!).objs.filter((o) =>
      ['ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding'].includes(o.kind),
    );
    const yaml = rbac.map((o) => `---\n${stringify(o)}`).join('');
    const kc = ['--kubeconfig', join(dir, 'admin')];
    const del = spawnSync(KUBECTL, [...kc, 'delete', '--ignore-not-found', '-f', '-'], {
      input: yaml,
      encoding: 'utf8',
    });
    assert.is(del.status, 0, del.stderr);
    const put = spawnSync(
      KUBECTL,
      [...kc, 'apply', '--server-side', '--field-manager=helm-test', '-f', '-'],
      {
        input: yaml,
        encoding: 'utf8',
      },
    );
    assert.is(put.status, 0, put.stderr);
    console.log(`\n(the chart's RBAC)\n${(await sarMatrix(kube)).join('\n')}\n`);
  } finally {
    await kube.close();
    await t.close();
  }
});

test.run();
