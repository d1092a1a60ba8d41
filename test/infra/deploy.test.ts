/**
 * The deployment, tested: every overlay renders with `kubectl kustomize`, is
 * accepted by the real API server (server-side dry-run), and each function runs
 * from the CLI as its own ServiceAccount identity; a SubjectAccessReview matrix
 * shows each identity is refused what it does not need.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { parseAllDocuments } from 'yaml';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { fileSchema, resolveConfig } from '../../shared/config.ts';
import { RUNTIME_RULES } from '../../shared/contract/access.ts';
import { functionManifests } from '../../shared/deploy/manifests.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { CRONJOBS, DEPLOYMENTS, JOBS, type KubeObject, NAMESPACES } from '../../shared/kube/resources.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { leakedEndpoint, R } from '../../shared/sandbox/scenarios/danm.ts';
import { controllerPort } from '../../shared/sandbox/scenarios/lbaas.ts';
import { controllerDeployment } from '../../shared/sandbox/scenarios/lbaas-controller.ts';
import { allocations, containerId, createPool } from '../../shared/sandbox/scenarios/whereabouts.ts';
import { stateConfigMapNames } from '../../shared/state/configmap.ts';
import { FileLock } from '../../shared/state/file.ts';
import { binDir, IDENTITIES } from '../cluster/cluster.ts';
import { cliFiles, twopass, twopassAsync } from '../helpers/cli.ts';
import { type KubeTarget, realTarget } from '../helpers/kube-target.ts';
import { captureLog } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';
import { realOpenStack } from '../openstack/real-openstack.ts';
import { realWorld } from '../openstack/real-world.ts';
import { sarMatrix } from './sar-matrix.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const OVERLAYS = readdirSync(join(ROOT, 'infra/kustomize/overlays')).sort();
const KUBECTL = join(binDir(), 'kubectl');
type Obj = {
  kind: string;
  apiVersion: string;
  metadata: { name: string; namespace?: string };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
  rules?: unknown[];
};

function render(overlay: string): Obj[] {
  const yaml = execFileSync(KUBECTL, ['kustomize', join(ROOT, 'infra/kustomize/overlays', overlay)], {
    encoding: 'utf8',
  });
  return parseAllDocuments(yaml).map((d) => d.toJS() as Obj);
}

const offline = suite('infra: rendering and the image');

offline(
  'every overlay renders; CronJobs are hardened; configs parse; the dry-run overlay does not delete',
  () => {
    assert.ok(existsSync(KUBECTL), `kubectl is built by test/cluster/build.sh into ${KUBECTL}`);
    assert.equal(OVERLAYS, [
      'cilium-rules',
      'danm-endpoints',
      'dry-run',
      'lbaas-ports',
      'scheduler',
      'whereabouts-ips',
    ]);
    for (const o of OVERLAYS) {
      const objs = render(o);
      const jobs = objs.filter((x) => x.kind === 'CronJob');
      assert.ok(jobs.length >= 1 || o === 'scheduler', o);
      for (const j of jobs) {
        const spec = j.spec as {
          concurrencyPolicy: string;
          startingDeadlineSeconds: number;
          jobTemplate: {
            spec: {
              backoffLimit: number;
              activeDeadlineSeconds: number;
              template: {
                spec: {
                  securityContext: { runAsNonRoot: boolean };
                  containers: {
                    args: string[];
                    resources: { requests: object; limits: object };
                    securityContext: {
                      readOnlyRootFilesystem: boolean;
                      allowPrivilegeEscalation: boolean;
                      capabilities: { drop: string[] };
                    };
                  }[];
                };
              };
            };
          };
        };
        assert.is(spec.concurrencyPolicy, 'Forbid');
        assert.ok(spec.startingDeadlineSeconds > 0);
        const js = spec.jobTemplate.spec;
        assert.ok(js.activeDeadlineSeconds > 0);
        assert.is(js.backoffLimit, 0);
        assert.is(js.template.spec.securityContext.runAsNonRoot, true);
        const c = js.template.spec.containers[0]!;
        assert.is(c.securityContext.readOnlyRootFilesystem, true);
        assert.is(c.securityContext.allowPrivilegeEscalation, false);
        assert.equal(c.securityContext.capabilities.drop, ['ALL']);
        assert.ok(c.resources.requests && c.resources.limits);
        assert.is(c.args[0], 'run');
      }
      const cm = objs.find((x) => x.kind === 'ConfigMap' && x.metadata.name.startsWith('twopass-config'))!;
      const cfg = fileSchema.parse(parseAllDocuments(cm.data!['config.yaml']!)[0]!.toJS());
      if (o === 'dry-run' || o === 'scheduler' || o === 'cilium-rules')
        assert.is(cfg.apply, false, 'the first rollout is a dry run');
      else assert.is(cfg.apply, true);
    }
  },
);

offline(
  'the cilium-rules overlay holds what `twopass rules manifests` prints for each pack (no drift)',
  () => {
    for (const p of ['cilium-endpoints', 'cilium-identities']) {
      const r = twopass(['rules', 'manifests', join(ROOT, 'functions/rules', p, 'rule.yaml')]);
      assert.is(r.code, 0, r.err);
      const committed = readFileSync(
        join(ROOT, 'infra/kustomize/overlays/cilium-rules', `${p}.yaml`),
        'utf8',
      );
      assert.equal(
        parseAllDocuments(committed).map((d) => d.toJS()),
        parseAllDocuments(r.out).map((d) => d.toJS()),
        `${p}: regenerate with \`twopass rules manifests functions/rules/${p}/rule.yaml\``,
      );
    }
  },
);

offline(
  "every generated deployment file is what `npm run manifests` builds from the functions' declarations (no drift)",
  async () => {
    const { generatedFiles } = await import('../../infra/manifests.ts');
    const files = generatedFiles();
    for (const fn of ['danm-endpoints', 'whereabouts-ips', 'lbaas-ports'])
      for (const f of ['serviceaccount', 'rbac', 'cronjob'])
        assert.ok(files.has(`infra/kustomize/components/${fn}/${f}.yaml`), `${fn}/${f}.yaml is generated`);
    assert.ok(files.has('infra/helm/twopass/files/access.yaml'));
    for (const [path, text] of files)
      assert.fixture(readFileSync(join(ROOT, path), 'utf8'), text, `${path}: run \`npm run manifests\``);
  },
);

offline(
  "a function's manifests come from its access alone: its ClusterRole, its Roles where a setting says, its OpenStack Secret",
  () => {
    const access = {
      cluster: [{ apiGroups: ['x.io'], resources: ['things'], verbs: ['list', 'get', 'delete'] }],
      namespaced: [
        {
          role: 'peer',
          why: 'test',
          setting: 'peer',
          defaultNamespace: 'peers',
          rules: [{ apiGroups: ['apps'], resources: ['deployments'], verbs: ['get'] }],
        },
      ],
      openstack: true,
    };
    const f = { name: 'things', schedule: '* * * * *', access };
    const at = (settings?: Record<string, unknown>) =>
      functionManifests(f, { namespace: 'ops', image: 'i', ...(settings ? { settings } : {}) }) as Obj[];
    const all = at();
    const cr = all.find((o) => o.kind === 'ClusterRole')!;
    assert.equal(cr.rules, [...access.cluster, ...RUNTIME_RULES]);
    const roleNs = (objs: Obj[]) =>
      objs
        .filter((o) => o.metadata.name === 'twopass-things-peer')
        .map((o) => `${o.kind}/${o.metadata.namespace}`);
    assert.equal(roleNs(all), ['Role/peers', 'RoleBinding/peers'], 'the default namespace');
    assert.equal(roleNs(at({ peer: { namespace: 'elsewhere' } })), [
      'Role/elsewhere',
      'RoleBinding/elsewhere',
    ]);
    assert.equal(roleNs(at({ peer: 'none' })), [], 'a setting that is not a map: nothing to read');
    const job = JSON.stringify(all.find((o) => o.kind === 'CronJob'));
    assert.match(job, /"secretName":"twopass-openstack"/);
    assert.match(job, /OS_CLIENT_CONFIG_FILE/);
    const plain = JSON.stringify(
      functionManifests({ ...f, access: { cluster: access.cluster } }, { namespace: 'ops', image: 'i' }),
    );
    assert.not.match(plain, /openstack|twopass-things-peer/);
  },
);

offline(
  "a rule's CronJob has the environment of the built-in ones (metrics for the alerts, the webhook)",
  () => {
    type Env = { name: string; valueFrom?: unknown };
    const envOf = (docs: { kind: string; spec?: { jobTemplate?: unknown } }[]) => {
      const cj = docs.find((d) => d.kind === 'CronJob') as unknown as {
        spec: { jobTemplate: { spec: { template: { spec: { containers: { env: Env[] }[] } } } } };
      };
      return cj.spec.jobTemplate.spec.template.spec.containers[0]!.env;
    };
    const builtIn = envOf(
      parseAllDocuments(
        readFileSync(join(ROOT, 'infra/kustomize/components/danm-endpoints/cronjob.yaml'), 'utf8'),
      ).map((d) => d.toJS()),
    );
    for (const p of ['cilium-endpoints', 'cilium-identities']) {
      const r = twopass(['rules', 'manifests', join(ROOT, 'functions/rules', p, 'rule.yaml')]);
      const env = envOf(parseAllDocuments(r.out).map((d) => d.toJS()));
      for (const e of builtIn)
        assert.equal(
          env.find((x) => x.name === e.name),
          e,
          `${p}: ${e.name} as in the built-in CronJobs`,
        );
    }
  },
);

offline('each function may touch exactly the state ConfigMaps and the Lease its store uses', () => {
  for (const fn of ['danm-endpoints', 'whereabouts-ips', 'lbaas-ports']) {
    const docs = parseAllDocuments(
      readFileSync(join(ROOT, 'infra/kustomize/components', fn, 'rbac.yaml'), 'utf8'),
    ).map((d) => d.toJS() as Obj);
    const role = docs.find((d) => d.kind === 'Role' && d.metadata.name === `twopass-${fn}-state`);
    assert.ok(role, `${fn}: a state Role`);
    const rules = role.rules as { resources: string[]; resourceNames?: string[]; verbs: string[] }[];
    const named = (r: string) => rules.find((x) => x.resources.includes(r) && x.resourceNames)?.resourceNames;
    assert.equal(named('configmaps'), stateConfigMapNames(fn), `${fn}: ConfigMaps by name`);
    assert.equal(named('leases'), [`twopass-${fn}`], `${fn}: its Lease by name`);
  }
});

offline(
  "the scheduler overlay: one hardened Deployment scraped through a Service, no CronJobs, only the functions' roles",
  () => {
    const objs = render('scheduler');
    assert.equal(
      objs.filter((x) => x.kind === 'CronJob'),
      [],
      'no CronJob beside the scheduler',
    );
    const dep = objs.find((x) => x.kind === 'Deployment')!;
    const pod = (dep.spec as { template: { spec: Record<string, unknown> } }).template.spec as {
      serviceAccountName: string;
      securityContext: { runAsNonRoot: boolean };
      containers: {
        args: string[];
        ports: { name: string; containerPort: number }[];
        securityContext: { readOnlyRootFilesystem: boolean; allowPrivilegeEscalation: boolean };
      }[];
    };
    const c = pod.containers[0]!;
    assert.equal(c.args.slice(0, 1), ['schedule']);
    assert.is(c.args[c.args.indexOf('--listen') + 1], '0.0.0.0:9464', 'listens where Prometheus can scrape');
    assert.is(pod.securityContext.runAsNonRoot, true);
    assert.is(c.securityContext.readOnlyRootFilesystem, true);
    assert.is(c.securityContext.allowPrivilegeEscalation, false);
    const svc = objs.find((x) => x.kind === 'Service')!;
    assert.equal(
      (svc.spec as { ports: { port: number }[] }).ports.map((p) => p.port),
      [9464],
    );
    assert.ok(objs.some((x) => x.kind === 'ServiceMonitor'));
    assert.ok(objs.some((x) => x.kind === 'PrometheusRule'));
    const fnRoles = new Set(['twopass-danm-endpoints', 'twopass-whereabouts-ips', 'twopass-lbaas-ports']);
    for (const b of objs.filter(
      (x) => /RoleBinding$/.test(x.kind) && x.metadata.name.startsWith('twopass-scheduler'),
    )) {
      const { roleRef, subjects } = b as unknown as {
        roleRef: { name: string };
        subjects: { name: string }[];
      };
      assert.ok(
        fnRoles.has(roleRef.name.replace(/-(state|controller)$/, '')),
        `${b.metadata.name} binds a function's own role`,
      );
      assert.equal(
        subjects.map((x) => x.name),
        ['twopass-scheduler'],
      );
    }
    assert.not.ok(
      objs.some((x) => x.kind === 'ClusterRole' && x.metadata.name.startsWith('twopass-scheduler')),
      'no role of its own',
    );
  },
);

offline(
  'the Dockerfile copies files that exist, runs as non-root without dev dependencies, and its entrypoint runs',
  () => {
    const lines = readFileSync(join(ROOT, 'infra/Dockerfile'), 'utf8').split('\n');
    // sources in the build context (a COPY --from= copies from a build stage)
    for (const l of lines.filter((x) => x.startsWith('COPY ') && !x.includes('--from='))) {
      const parts = l.split(/\s+/).slice(1, -1);
      for (const p of parts) assert.ok(existsSync(join(ROOT, p)), `COPY source ${p} exists`);
    }
    // The Dockerfile's own variable syntax, not a template string.
    const fromBase = ['FROM $', '{BASE}'].join('');
    assert.ok(
      lines.some((l) => /^ARG BASE=node:24-/.test(l)) && lines.some((l) => l.startsWith(fromBase)),
      'Node 24 base, overridable by digest',
    );
    assert.ok(lines.some((l) => /npm ci --omit=dev/.test(l)));
    // the image's user: the last USER (a build stage may switch back to root to assemble it)
    const user = lines.filter((l) => l.startsWith('USER ')).at(-1);
    assert.ok(user && !/\b(root|0)(:|$)/.test(user.slice(5)), 'non-root');
    const entry = JSON.parse(
      lines.find((l) => l.startsWith('ENTRYPOINT '))!.slice('ENTRYPOINT '.length),
    ) as string[];
    assert.equal(entry, ['/usr/local/bin/node', '/app/bin/twopass.js']);
    const r = spawnSync(process.execPath, [join(ROOT, 'bin/twopass.js'), '--help'], { encoding: 'utf8' });
    assert.is(r.status, 0);
    assert.match(r.stdout, /Usage: twopass/);
  },
);

offline(
  'the Grafana dashboard: the three shipped copies are what infra/monitoring/dashboard.ts builds; the scheduler overlay carries it as a ConfigMap for the sidecar; every panel query filters by the function variable',
  async () => {
    const { dashboardJson, PANELS, SHIPPED } = await import('../../infra/monitoring/dashboard.ts');
    const built = dashboardJson();
    for (const f of SHIPPED)
      assert.is(readFileSync(join(ROOT, f), 'utf8'), built, `${f}: regenerate with \`npm run dashboard\``);
    const cm = render('scheduler').find(
      (o) => o.kind === 'ConfigMap' && o.metadata.name === 'twopass-dashboard',
    );
    assert.ok(cm, 'the scheduler overlay (with the monitoring component) has twopass-dashboard');
    assert.is((cm.metadata as { labels?: Record<string, string> }).labels?.grafana_dashboard, '1');
    assert.equal(JSON.parse(cm.data!['twopass.json']!), JSON.parse(built));
    const model = JSON.parse(built) as { panels: { type: string; targets?: { expr: string }[] }[] };
    const exprs = model.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    assert.is(exprs.length, PANELS.flatMap((p) => p.queries).length, 'every query of PANELS is in the model');
    for (const e of exprs)
      if (!e.includes('twopass_build_info')) assert.match(e, /function=~"\$function"/, e);
  },
);

offline("the image caps V8's heap below every memory limit the manifests set", () => {
  const docker = readFileSync(join(ROOT, 'infra/Dockerfile'), 'utf8');
  const opts = /^ENV NODE_OPTIONS="([^"]*)"/m.exec(docker)?.[1] ?? '';
  const flag = (name: string) => Number(new RegExp(`--${name}=(\\d+)`).exec(opts)?.[1] ?? Number.NaN);
  const heap = flag('max-old-space-size');
  const semi = flag('max-semi-space-size');
  assert.ok(Number.isFinite(heap) && Number.isFinite(semi), `a heap cap in NODE_OPTIONS (${opts})`);
  // the old space, three semi-spaces of young generation, and Node's own ~100 MiB besides the heap
  const needs = heap + 3 * semi + 100;
  const limits: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.ya?ml$/.test(e.name))
        for (const m of readFileSync(p, 'utf8').matchAll(/limits:\s*\{?\s*memory:\s*(\d+)(Mi|Gi)/g))
          limits.push(`${p.slice(ROOT.length + 1)} ${m[1]}${m[2]}`);
    }
  };
  walk(join(ROOT, 'infra'));
  assert.ok(limits.length >= 5, `memory limits found: ${limits.length}`);
  for (const l of limits) {
    const [, n, unit] = /(\d+)(Mi|Gi)$/.exec(l)!;
    const mib = Number(n) * (unit === 'Gi' ? 1024 : 1);
    assert.ok(needs <= mib, `${l}: the image's heap cap needs ${needs} MiB`);
  }
});

const real = suite<{ t?: KubeTarget; dir: string }>('infra on the real test cluster', { dir: '' });
real.before(async (ctx) => {
  const t = await realTarget();
  if (!t) return;
  ctx.t = t;
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-deploy-'));
  writeFileSync(join(ctx.dir, 'admin'), t.kubeconfig());
  const kube = t.client();
  if (!(await kube.get(NAMESPACES, undefined, 'twopass-system')))
    await kube.create(NAMESPACES, { metadata: { name: 'twopass-system' } });
  await kube.close();
});
real.after(async (ctx) => ctx.t?.close());

function kubectl(dir: string, args: string[], input?: string) {
  return spawnSync(KUBECTL, ['--kubeconfig', join(dir, 'admin'), ...args], {
    encoding: 'utf8',
    ...(input !== undefined ? { input } : {}),
  });
}

real(
  'every overlay is accepted by the API server (server-side dry-run), then the dry-run overlay is applied',
  async ({ t, dir }) => {
    if (!t) return;
    for (const o of OVERLAYS) {
      const yaml = execFileSync(KUBECTL, ['kustomize', join(ROOT, 'infra/kustomize/overlays', o)], {
        encoding: 'utf8',
      });
      const r = kubectl(dir, ['apply', '--server-side', '--dry-run=server', '-f', '-'], yaml);
      assert.is(r.status, 0, `${o}: ${r.stderr}`);
      if (o === 'scheduler') {
        assert.match(r.stdout, /deployment\.apps\/twopass-scheduler serverside-applied \(server dry run\)/);
        assert.match(
          r.stdout,
          /servicemonitor\.monitoring\.coreos\.com\/twopass-scheduler serverside-applied/,
        );
        assert.match(r.stdout, /prometheusrule\.monitoring\.coreos\.com\/twopass serverside-applied/);
      } else assert.match(r.stdout, /cronjob\.batch\/twopass-.* serverside-applied \(server dry run\)/);
    }
    for (const o of ['dry-run', 'lbaas-ports']) {
      const yaml = execFileSync(KUBECTL, ['kustomize', join(ROOT, 'infra/kustomize/overlays', o)], {
        encoding: 'utf8',
      });
      const r = kubectl(dir, ['apply', '--server-side', '-f', '-'], yaml);
      assert.is(r.status, 0, r.stderr);
    }
  },
);

type LeakWorld = { t: KubeTarget; dir: string; kube: KubeHttpClient; ns: string; ep: KubeObject };

/** A test on the real cluster, in a fresh namespace that holds one leaked DanmEp on `ip`. */
function realWithLeak(name: string, ip: string, body: (w: LeakWorld) => Promise<void>): void {
  real(name, async ({ t, dir }) => {
    if (!t) return;
    const kube = t.client();
    try {
      const ns = await t.namespace();
      await body({ t, dir, kube, ns, ep: await leakedEndpoint(kube, ns, ip) });
    } finally {
      await kube.close();
    }
  });
}

realWithLeak(
  'each function runs from the CLI as its own identity, with ConfigMap state and a Lease',
  '10.10.10.8',
  async ({ t, dir, kube, ns, ep }) => {
    await createPool(kube, ns, 'pool', '192.168.2.0/24', {
      '192.168.2.10': { id: containerId(), podref: `${ns}/gone-1` },
    });
    for (const fn of ['danm-endpoints', 'whereabouts-ips']) {
      const files = cliFiles(
        join(dir, fn),
        t.kubeconfig(IDENTITIES[fn]!.token),
        `state: configmap:twopass-system\neventNamespace: twopass-system\nallowShortGrace: true\nfunctions:\n  ${fn}:\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    settings:\n      namespaces: [${ns}]\n`,
      );
      const args = ['run', fn, ...files, '--apply'];
      const first = twopass(args);
      assert.is(first.code, 0, `${fn} as its identity: ${first.out.slice(-800)} ${first.err}`);
      const second = twopass(args);
      assert.is(second.code, 0, `${fn} second run: ${second.out.slice(-800)}`);
      assert.ok(
        second.json().some((e) => e.event === 'resource.deleted'),
        `${fn} deleted its orphan`,
      );
      const show = twopass(['state', 'show', fn, ...files]);
      assert.is(show.code, 0, show.err);
      assert.match(show.out, /configmap:twopass-system \(version \d+\)/);
    }
    assert.is(await kube.get(R.danmeps, ns, ep.metadata.name), undefined);
    assert.equal(await allocations(kube, ns, 'pool'), {});
    // lbaas-ports as its identity, against the fake Keystone + Neutron
    const os = new FakeOpenStack();
    await os.start();
    try {
      const lb = controllerPort(os, { withFip: false });
      await lbaasTwice(t, join(dir, 'fake'), os.cloudsYaml('appcred', 'openstack'), 'project-a');
      assert.not.ok(os.ports.has(lb.port.id), 'lbaas-ports deleted its orphan port as its own identity');
    } finally {
      await os.stop();
    }
    // an identity without the rights aborts (exit 3) and deletes nothing
    writeFileSync(join(dir, 'nobody'), t.kubeconfig(IDENTITIES.nobody!.token));
    const denied = twopass([
      'run',
      'danm-endpoints',
      '--kubeconfig',
      join(dir, 'nobody'),
      '--state',
      `file:${join(dir, 'nobody-state')}`,
      '--apply',
    ]);
    assert.is(denied.code, 3);
  },
);

realWithLeak(
  'a run that does not end ok leaves a Warning Event that `kubectl describe` shows on its Job, else its CronJob',
  '10.10.10.6',
  async ({ dir, kube, ns }) => {
    const podSpec = { restartPolicy: 'Never', containers: [{ name: 'twopass', image: 'twopass:test' }] };
    await kube.create(CRONJOBS, {
      metadata: { name: 'twopass-danm-endpoints', namespace: ns },
      spec: {
        schedule: '*/5 * * * *',
        suspend: true,
        jobTemplate: { spec: { template: { spec: podSpec } } },
      },
    });
    const job = 'twopass-danm-endpoints-29400000';
    await kube.create(JOBS, {
      metadata: { name: job, namespace: ns },
      spec: { suspend: true, template: { spec: podSpec } },
    });
    const state = join(dir, `events-${ns}`);
    const cfg = resolveConfig(
      {
        allowShortGrace: true,
        eventNamespace: ns,
        functions: {
          'danm-endpoints': { grace: 0, minAge: 0, maxDeletions: 0, settings: { namespaces: [ns] } },
        },
      },
      'events test',
      { state: `file:${state}`, kubeconfig: join(dir, 'admin') },
    );
    const run = (processEnv: Record<string, string>) =>
      runFunction(
        danmEndpoints,
        cfg,
        { time: testTime(), log: captureLog(Date.now).log, processEnv },
        { apply: true },
      );
    const describe = (kind: string, name: string) => {
      const r = kubectl(dir, ['describe', kind, name, '-n', ns]);
      assert.is(r.status, 0, r.stderr);
      return r.stdout;
    };
    assert.is((await run({})).outcome, 'ok', 'the first observation');
    // the guard refuses (maxDeletions 0): outside a Job, the Event is on the CronJob
    assert.is((await run({})).outcome, 'refused');
    assert.match(
      describe('cronjob', 'twopass-danm-endpoints'),
      /Warning\s+TwopassRunRefused\s+.*refused \(exit 4\)/,
    );
    // inside a Job (the pod's job-name label): on the Job
    assert.is((await run({ TWOPASS_JOB_NAME: job })).outcome, 'refused');
    assert.match(describe('job', job), /Warning\s+TwopassRunRefused/);
    // another run holds the lock
    const held = await new FileLock(state, Date.now).acquire('danm-endpoints');
    try {
      assert.is((await run({ TWOPASS_JOB_NAME: job })).outcome, 'locked');
    } finally {
      await held.release();
    }
    assert.match(describe('job', job), /Warning\s+TwopassRunLocked/);
  },
);

realWithLeak(
  'the dry-run overlay records: its CronJob command, run twice, shows the second observation with dryRun (nothing deleted)',
  '10.10.10.9',
  async ({ t, dir, kube, ns, ep }) => {
    const objs = render('dry-run');
    const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('twopass-config'))!;
    const config = cm.data!['config.yaml']!;
    assert.ok(fileSchema.parse(parseAllDocuments(config)[0]!.toJS()).record, 'the overlay sets record: true');
    const job = objs.find((o) => o.kind === 'CronJob' && o.metadata.name === 'twopass-danm-endpoints')!;
    const c = (
      job.spec as { jobTemplate: { spec: { template: { spec: { containers: { args: string[] }[] } } } } }
    ).jobTemplate.spec.template.spec.containers[0]!;
    writeFileSync(join(dir, 'dry-run.yaml'), config);
    writeFileSync(join(dir, 'dry-run-kubeconfig'), t.kubeconfig());
    // the CronJob's own command, its config file mounted here
    const args = c.args.map((a) => (a === '/etc/twopass/config.yaml' ? join(dir, 'dry-run.yaml') : a));
    const run = () => twopass([...args, '--kubeconfig', join(dir, 'dry-run-kubeconfig')]);
    const first = run();
    assert.is(first.code, 0, first.out.slice(-600) + first.err);
    assert.ok(first.json().some((e) => e.event === 'candidate.new' && e.key === ep.metadata.uid));
    const second = run();
    assert.is(second.code, 0, second.out.slice(-600) + second.err);
    const seen = second
      .json()
      .find(
        (e) =>
          (e.event === 'candidate.pending' || e.event === 'candidate.confirmed') && e.key === ep.metadata.uid,
      );
    assert.ok(seen, 'the later run builds on the recorded observation');
    const finished = second.json().find((e) => e.event === 'run.finished');
    assert.is(finished?.dryRun, true);
    assert.ok(await kube.get(R.danmeps, ns, ep.metadata.name), 'a dry run deletes nothing');
  },
);

real(
  'lbaas-ports as its own ServiceAccount identity against the real Keystone + Neutron (application credential)',
  async ({ t, dir }) => {
    const os = realOpenStack();
    if (!t || !os) {
      console.log(
        '  !!! no real Keystone + Neutron: lbaas-ports as its identity on the real OpenStack is not run',
      );
      return;
    }
    const { controllerPort, exists } = realWorld(os);
    const leak = await controllerPort();
    const [, second] = await lbaasTwice(
      t,
      join(dir, 'real'),
      `clouds:\n  openstack:\n    auth_type: v3applicationcredential\n    region_name: ${os.region}\n    auth:\n      auth_url: ${os.authUrl}\n      application_credential_id: ${os.appCred.id}\n      application_credential_secret: ${os.appCred.secret}\n`,
      os.project.id,
    );
    assert.ok(second.json().some((e) => e.event === 'resource.deleted' && e.key === leak.port.id));
    assert.not.ok(await exists('ports', leak.port.id), 'deleted on the real Neutron, as its own identity');
    assert.not.ok(await exists('floatingips', leak.fip!.id));
  },
);

/** lbaas-ports from the CLI as its own ServiceAccount, twice with --apply (observe, then delete). */
async function lbaasTwice(t: KubeTarget, dir: string, clouds: string, projectId: string) {
  // The ch-k8s-lbaas controller scaled to 0 where the shipped Role lets the identity read it.
  const admin = t.client();
  try {
    if (!(await admin.get(DEPLOYMENTS, 'kube-system', 'ch-k8s-lbaas-controller')))
      await admin.create(DEPLOYMENTS, controllerDeployment());
  } finally {
    await admin.close();
  }
  const files = cliFiles(
    dir,
    t.kubeconfig(IDENTITIES['lbaas-ports']!.token),
    `state: configmap:twopass-system\nallowShortGrace: true\nfunctions:\n  lbaas-ports:\n    enabled: true\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    maxEvidenceDropPercent: 100\n    settings:\n      projectId: ${projectId}\n`,
  );
  writeFileSync(join(dir, 'clouds.yaml'), clouds);
  const env = { OS_CLOUD: 'openstack', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') };
  const args = ['run', 'lbaas-ports', ...files];
  const first = await twopassAsync([...args, '--apply'], env);
  assert.is(first.code, 0, first.out.slice(-600) + first.err);
  const second = await twopassAsync([...args, '--apply'], env);
  assert.is(second.code, 0, second.out.slice(-600));
  return [first, second] as const;
}

real('SubjectAccessReview matrix: each identity has what it needs and nothing else', async ({ t }) => {
  if (!t) return;
  const kube = t.client();
  try {
    console.log(`\n${(await sarMatrix(kube)).join('\n')}\n`);
  } finally {
    await kube.close();
  }
});

offline.run();
real.run();
