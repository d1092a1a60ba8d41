/**
 * Installing twopass on the test node as an operator does, and running its CronJobs' Jobs:
 * render a kustomize overlay or the Helm chart, set the config's values, apply it with
 * kubectl, create a Job from a CronJob (`kubectl create job --from=cronjob/…`) and wait
 * for its end, read as `kubectl` would: its conditions, its pods, their exit codes and logs.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'uvu';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { binDir, type Cluster } from '../cluster/cluster.ts';
import { type Node, podLog } from './node.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
export const KUBECTL = join(binDir(), 'kubectl');
export const HELM = join(process.env.TWOPASS_CACHE ?? join(homedir(), '.cache/twopass'), 'helm/v4.3.2/helm');
export const NS = 'twopass-system';

/** Polls `f` every half second (kubectl is a process) until it gives a value. */
export async function poll<T>(what: string, f: () => T | undefined, ms: number): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out after ${ms / 1000}s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

export type Obj = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid?: string; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
  data?: Record<string, string>;
  rules?: { apiGroups: string[]; resources: string[]; verbs: string[] }[];
};

export function kubectl(cluster: Cluster, args: string[], input?: string): string {
  const r = spawnSync(KUBECTL, ['--kubeconfig', cluster.kubeconfigPath, ...args], {
    encoding: 'utf8',
    ...(input !== undefined ? { input } : {}),
  });
  if (r.status !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

/** An overlay as `kubectl kustomize` renders it. */
export function renderOverlay(overlay: string): Obj[] {
  const yaml = execFileSync(KUBECTL, ['kustomize', join(ROOT, 'infra/kustomize/overlays', overlay)], {
    encoding: 'utf8',
  });
  return parseAllDocuments(yaml)
    .map((d) => d.toJS() as Obj)
    .filter(Boolean);
}

/** The Helm chart as `helm template` renders it, with `--set` values. */
export function renderChart(set: string[]): Obj[] {
  if (!existsSync(HELM)) throw new Error(`no helm at ${HELM} (test/helm/build.sh)`);
  const yaml = execFileSync(
    HELM,
    ['template', 'twopass', join(ROOT, 'infra/helm/twopass'), '-n', NS, ...set.flatMap((s) => ['--set', s])],
    { encoding: 'utf8' },
  );
  return parseAllDocuments(yaml)
    .map((d) => d.toJS() as Obj)
    .filter(Boolean);
}

/**
 * The install's config file with `change` applied to it (as an operator edits the overlay's
 * config.yaml or the chart's values before applying).
 */
export function withConfig(objs: Obj[], change: (config: Record<string, unknown>) => void): Obj[] {
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('twopass-config'));
  if (!cm?.data?.['config.yaml']) throw new Error('the install has no twopass-config ConfigMap');
  const config = parse(cm.data['config.yaml']) as Record<string, unknown>;
  change(config);
  cm.data['config.yaml'] = stringify(config);
  return objs;
}

/** Test graces: short (allowed by allowShortGrace), every object old enough, no percentage guard. */
export function shortGrace(fn: string, extra: Record<string, unknown> = {}) {
  return (config: Record<string, unknown>) => {
    config.allowShortGrace = true;
    config.functions ??= {};
    const fns = config.functions as Record<string, Record<string, unknown>>;
    fns[fn] = { ...fns[fn], grace: '2s', minAge: '0s', maxDeletionPercent: 100, ...extra };
  };
}

/**
 * Applies an install with its CronJobs suspended: a test runs its own Jobs
 * (`kubectl create job --from=cronjob/…` works on a suspended CronJob), and a schedule
 * firing in between would hold the function's Lease (exit 5) or race the test's Job.
 * The Forbid test lifts the suspension itself.
 */
export const apply = (cluster: Cluster, objs: Obj[]) =>
  kubectl(
    cluster,
    ['apply', '-f', '-'],
    objs
      .map((o) => (o.kind === 'CronJob' ? { ...o, spec: { ...(o.spec as object), suspend: true } } : o))
      .map((o) => stringify(o))
      .join('---\n'),
  );

/** Deletes what an install created and waits until its namespace is gone. */
export async function uninstall(cluster: Cluster, objs: Obj[]): Promise<void> {
  if (objs.length)
    kubectl(
      cluster,
      ['delete', '--ignore-not-found', '--wait=false', '-f', '-'],
      objs.map((o) => stringify(o)).join('---\n'),
    );
  kubectl(cluster, ['delete', 'namespace', NS, '--ignore-not-found', '--wait=false']);
  await poll(
    `namespace ${NS} is gone`,
    () => {
      const r = spawnSync(KUBECTL, ['--kubeconfig', cluster.kubeconfigPath, 'get', 'namespace', NS]);
      return r.status !== 0 ? true : undefined;
    },
    120_000,
  );
}

export type JobEnd = {
  /** The Job's final condition. */
  condition: 'Complete' | 'Failed';
  job: Obj;
  pods: Obj[];
  /** The container's exit code in the (only) pod. */
  exitCode: number | undefined;
  reason: string | undefined;
  log: string;
  /** The log's JSON lines. */
  events: Record<string, unknown>[];
};

const getJson = <T>(cluster: Cluster, args: string[]) =>
  JSON.parse(kubectl(cluster, ['get', ...args, '-o', 'json'])) as T;

/** Waits for a Job to end; its pods, exit code and log. */
export async function jobEnd(cluster: Cluster, node: Node, name: string, ns = NS): Promise<JobEnd> {
  const [job, condition] = await poll(
    `Job ${ns}/${name} ends`,
    () => {
      const j = getJson<Obj>(cluster, ['job', name, '-n', ns]);
      const c = (j.status?.conditions as { type: string; status: string }[] | undefined)?.find(
        (x) => (x.type === 'Complete' || x.type === 'Failed') && x.status === 'True',
      );
      return c ? ([j, c.type as 'Complete' | 'Failed'] as const) : undefined;
    },
    240_000,
  );
  const pods = getJson<{ items: Obj[] }>(cluster, [
    'pods',
    '-n',
    ns,
    '-l',
    `batch.kubernetes.io/job-name=${name}`,
  ]).items;
  const terminated = (
    pods[0]?.status?.containerStatuses as
      | { state?: { terminated?: { exitCode: number; reason?: string } } }[]
      | undefined
  )?.[0]?.state?.terminated;
  const log = pods[0] ? podLog(node, ns, pods[0].metadata.name, 'twopass') : '';
  const events = log
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { condition, job, pods, exitCode: terminated?.exitCode, reason: terminated?.reason, log, events };
}

let jobs = 0;
/** `kubectl create job --from=cronjob/CRONJOB`, then its end. */
export async function runJob(cluster: Cluster, node: Node, cronjob: string, ns = NS): Promise<JobEnd> {
  const name = `${cronjob.replace(/^twopass-/, '')}-${++jobs}`;
  kubectl(cluster, ['create', 'job', name, `--from=cronjob/${cronjob}`, '-n', ns]);
  return jobEnd(cluster, node, name, ns);
}

/** The Events on one object, as `kubectl describe` lists them. */
export function eventsOn(cluster: Cluster, ns: string, kind: string, name: string) {
  return getJson<{
    items: { type: string; reason: string; message: string; involvedObject: { uid?: string } }[];
  }>(cluster, [
    'events',
    '-n',
    ns,
    '--field-selector',
    `involvedObject.kind=${kind},involvedObject.name=${name}`,
  ]).items;
}

export const summary = (j: JobEnd) =>
  `${j.condition} exit=${j.exitCode} (${j.reason}) pods=${j.pods.length}\n${j.log.slice(-1500)}`;

/** What a node suite's context holds: its cluster, node, client and the running test's install. */
export type NodeSuiteContext = {
  cluster: Cluster;
  node: Node;
  kube: { close: () => Promise<void> };
  /** What the running test installed: removed after it, passed or failed. */
  installed?: Obj[];
};

/** A node suite's closing hooks: each test's install removed after it; client, node and cluster stopped by PID at the end. */
export function stopsAfter<C extends NodeSuiteContext>(s: Test<C>): void {
  s.after.each(async (ctx) => {
    if (ctx.installed) await uninstall(ctx.cluster, ctx.installed);
    delete ctx.installed;
  });
  s.after(async (ctx) => {
    await ctx.kube?.close();
    await ctx.node?.stop();
    await ctx.cluster?.stop();
  });
}
