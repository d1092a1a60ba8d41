/**
 * `twopass rules`: check a rule file (compile and explain), test it against objects in
 * a file (no cluster), print the RBAC it needs, or the manifests that run it as its own
 * CronJob.
 */
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { checkRuleNames } from '../catalogue.ts';
import { formatDuration } from '../engine/duration.ts';
import { ConfigError, yamlMessage } from '../errors.ts';
import type { HistoryResult, KubeReader, ListOptions, ListResult } from '../kube/ports.ts';
import { apiVersionOf, type KubeObject, type ResourceRef } from '../kube/resources.ts';
import type { OutputMode } from '../log/logger.ts';
import { COST_LIMIT } from '../rules/cel.ts';
import { describeCloudRule, explainCloudRule } from '../rules/cloud-explain.ts';
import { cloudRuleFunction } from '../rules/cloud-function.ts';
import { WorldNeutron } from '../rules/cloud-world.ts';
import { ruleManifests, ruleRbac, toYamlDocs } from '../rules/deploy.ts';
import { ruleDefaults, ruleFunction } from '../rules/function.ts';
import { type AnyRule, isCloudRule, loadAnyRuleFile } from '../rules/registry.ts';
import type { Rule } from '../rules/rule.ts';
import { EXIT } from '../runtime/errors.ts';
import { validateSettings } from '../runtime/settings.ts';
import { VERSION } from '../version.ts';
import type { Io } from './io.ts';

const USAGE = 'usage: twopass rules check FILE | test FILE WORLD.yaml | rbac FILE | manifests FILE';

export type RulesFlags = Readonly<{ namespace?: string | undefined; image?: string | undefined }>;

export async function rulesCommand(
  args: readonly string[],
  output: OutputMode,
  io: Io,
  flags: RulesFlags,
): Promise<number> {
  const [sub, file, world, ...extra] = args;
  if (sub !== undefined && !['check', 'rbac', 'manifests', 'test'].includes(sub))
    throw new ConfigError(`rules: unknown subcommand \`${sub}\`; ${USAGE}`);
  if (!sub || !file || extra.length > 0 || (sub === 'test') !== (world !== undefined))
    throw new ConfigError(USAGE);
  const any = loadAnyRuleFile(file);
  checkRuleNames(any);
  if (sub === 'test' && any.some(isCloudRule)) return testRules(any, world!, output, io);
  if (sub === 'check') {
    for (const r of any) {
      const x = isCloudRule(r) ? explainCloudRule(r) : explainRule(r);
      io.out.write(
        output === 'json'
          ? `${JSON.stringify(x)}\n`
          : isCloudRule(r)
            ? describeCloudRule(r)
            : describeRule(r),
      );
    }
    return EXIT.ok;
  }
  const rules = any;
  const namespace = flags.namespace ?? 'twopass-system';
  switch (sub) {
    case 'rbac':
      io.out.write(toYamlDocs(rules.flatMap((r) => ruleRbac(r, namespace))));
      return EXIT.ok;
    case 'manifests':
      io.out.write(
        toYamlDocs(rules.flatMap((r) => ruleManifests(r, namespace, flags.image ?? `twopass:${VERSION}`))),
      );
      return EXIT.ok;
    case 'test':
      return testRules(rules, world!, output, io);
    default:
      throw new ConfigError(`rules: unknown subcommand \`${sub}\`; ${USAGE}`);
  }
}

const refText = (ref: ResourceRef) =>
  `${ref.plural}.${apiVersionOf(ref)} (${ref.kind}, ${ref.namespaced ? 'namespaced' : 'cluster-scoped'})`;

function explainRule(r: Rule) {
  const d = ruleDefaults(r);
  return {
    name: r.name,
    description: r.description,
    source: r.source,
    target: {
      resource: refText(r.target.ref),
      list: r.target.metadataOnly ? 'metadata only' : 'whole objects',
      ...(r.target.namespaces ? { namespaces: r.target.namespaces } : {}),
      ...(r.target.labelSelector ? { labelSelector: r.target.labelSelector } : {}),
      ...(r.target.fieldSelector ? { fieldSelector: r.target.fieldSelector } : {}),
    },
    owner: r.owner.describe,
    evidence: r.evidence.map((e) => ({
      name: e.name,
      resource: refText(e.ref),
      list: e.metadataOnly ? 'metadata only' : 'whole objects',
      key: `${e.key.source.trim()} (${e.key.type})`,
      ...(e.optional ? { optional: 'not served: holds nothing' } : {}),
    })),
    inUse: r.inUse.source.trim(),
    ...(r.indeterminate ? { indeterminate: r.indeterminate.source.trim() } : {}),
    identity: r.identity?.source.trim() ?? 'metadata.uid',
    fingerprint: ['metadata.uid', 'metadata.resourceVersion', ...r.fingerprint.map((f) => f.source.trim())],
    unused: r.unused,
    cost: Math.max(r.inUse.cost, r.indeterminate?.cost ?? 0),
    schedule: d.schedule,
    graceMs: d.graceMs,
    ...(d.minAgeMs !== undefined ? { minAgeMs: d.minAgeMs } : {}),
  };
}

function describeRule(r: Rule): string {
  const x = explainRule(r);
  const lines = [
    `rule ${x.name}: ok (${x.source})`,
    `  ${x.description}`,
    `  targets:     ${x.target.resource}, ${x.target.list}${x.target.namespaces ? `, namespaces ${x.target.namespaces.join(', ')}` : ''}${x.target.labelSelector ? `, labels ${x.target.labelSelector}` : ''}`,
    `  owned by:    ${x.owner}`,
    ...x.evidence.map(
      (e) =>
        `  evidence.${e.name}: ${e.resource}, ${e.list}, keyed by ${e.key}${e.optional ? `, ${e.optional}` : ''}`,
    ),
    `  in use when: ${x.inUse}`,
    ...(x.indeterminate ? [`  undecided when (non-empty): ${x.indeterminate}`] : []),
    `  identity:    ${x.identity}; fingerprint: ${x.fingerprint.join(', ')}`,
    `  unused:      ${x.unused}`,
    `  cost:        at most about ${x.cost.toLocaleString('en')} steps an object (limit ${COST_LIMIT.toLocaleString('en')}); \`matches\` runs on RE2 (linear time)`,
    `  schedule ${x.schedule}, grace ${formatDuration(x.graceMs)}${x.minAgeMs !== undefined ? `, minAge ${formatDuration(x.minAgeMs)}` : ''}`,
    '',
  ];
  return lines.join('\n');
}

/** The annotation a world object may carry to say what the rule must decide of it. */
export const EXPECT = 'twopass.io/expect';

/** Objects from a YAML file (documents, or `kind: List` items), served as a read-only cluster. */
export class WorldReader implements KubeReader {
  readonly objects: KubeObject[];
  source = 'world';
  constructor(objects: readonly KubeObject[]) {
    this.objects = objects.map((o, i) => ({
      ...o,
      metadata: {
        ...o.metadata,
        uid: o.metadata.uid ?? `world-${i}-${o.kind}-${o.metadata.namespace ?? ''}-${o.metadata.name}`,
        resourceVersion: o.metadata.resourceVersion ?? '1',
      },
    }));
  }
  static fromFile(path: string): WorldReader {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new ConfigError(`world ${path}: cannot read: ${(err as Error).message}`);
    }
    const out: KubeObject[] = [];
    for (const d of parseAllDocuments(text)) {
      if ('errors' in d && d.errors.length > 0)
        throw new ConfigError(`world ${path}: not valid YAML: ${yamlMessage(d.errors[0])}`);
      const v = d.toJS() as KubeObject | null;
      if (!v) continue;
      for (const o of v.kind === 'List' && Array.isArray(v.items) ? (v.items as KubeObject[]) : [v]) {
        if (
          !o ||
          typeof o !== 'object' ||
          typeof o.apiVersion !== 'string' ||
          typeof o.kind !== 'string' ||
          typeof o.metadata?.name !== 'string'
        )
          throw new ConfigError(`world ${path}: every object needs apiVersion, kind and metadata.name`);
        out.push(o);
      }
    }
    const w = new WorldReader(out);
    w.source = path;
    return w;
  }
  private of(ref: ResourceRef, namespace?: string): KubeObject[] {
    return this.objects.filter(
      (o) =>
        o.apiVersion === apiVersionOf(ref) &&
        o.kind === ref.kind &&
        (namespace === undefined || o.metadata.namespace === namespace),
    );
  }
  async listAll<T = KubeObject>(ref: ResourceRef, o: ListOptions<T> = {}): Promise<ListResult<T>> {
    const { selector } = await import('../sandbox/kube/server.ts');
    const match = selector(o.labelSelector ?? null, o.fieldSelector ?? null);
    const items = this.of(ref, o.namespace)
      .filter((x) => match(x as never))
      .map((x) =>
        o.metadataOnly ? ({ apiVersion: x.apiVersion, kind: x.kind, metadata: x.metadata } as KubeObject) : x,
      );
    const view = o.view ?? ((x: KubeObject) => x as unknown as T);
    return { items: items.map(view), resourceVersion: '1', pages: 1, restarts: 0 };
  }
  async get(ref: ResourceRef, namespace: string | undefined, name: string) {
    return this.of(ref, namespace).find((o) => o.metadata.name === name);
  }
  async serves(): Promise<boolean> {
    return true;
  }
  /** A world file is one moment: it has no history to replay. */
  async history<T>(): Promise<HistoryResult<T>> {
    return { broken: 'a world file has no history' };
  }
  expectations(ref: ResourceRef): Map<string, string> {
    const m = new Map<string, string>();
    for (const o of this.of(ref)) {
      const e = o.metadata.annotations?.[EXPECT];
      if (e) m.set(`${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name}`, e);
    }
    return m;
  }
}

export type WorldDecision = Readonly<{
  rule: string;
  kind: string;
  name: string;
  key: string;
  decision: 'in-use' | 'unused' | 'indeterminate' | 'kept';
  reason?: string;
}>;

/** Each target's decision against the objects of a world (one observation; nothing written). */
export async function decideWorld(
  rule: AnyRule,
  world: WorldReader,
  now: number,
): Promise<{ decisions: WorldDecision[]; notes: string[] }> {
  const notes: string[] = [];
  const ctx = {
    now,
    signal: new AbortController().signal,
    note: (event: string, fields: Record<string, unknown>) =>
      notes.push(`${event}: ${JSON.stringify(fields)}`),
  };
  let snap: Awaited<ReturnType<ReturnType<typeof ruleFunction>['observe']>>;
  if (isCloudRule(rule)) {
    const cloud = new WorldNeutron(world.objects, world.source);
    const fn = cloudRuleFunction(rule);
    snap = await fn.observe(cloud.reader(world), {
      ...ctx,
      // a world is judged, never deleted from: what an operator acknowledges before a real run is taken as said
      settings: validateSettings(
        fn,
        {
          projectId: cloud.projectId,
          cluster: cloud.cluster,
          clusterNameIsUnique: true,
          ...Object.fromEntries(rule.acknowledgements.map((a) => [a.setting, true])),
        },
        `rule ${rule.name}`,
      ),
    });
  } else {
    const fn = ruleFunction(rule);
    snap = await fn.observe(world, { ...ctx, settings: validateSettings(fn, {}, `rule ${rule.name}`) });
  }
  const used = new Set(snap.used);
  const ind = new Map(snap.indeterminate.map((i) => [i.key, i.reason]));
  const blockers = snap.blockers ?? [];
  const decisions = snap.targets.map((t): WorldDecision => {
    const base = { rule: rule.name, kind: t.kind, name: t.name, key: t.key };
    if (used.has(t.key)) return { ...base, decision: 'in-use' };
    if (ind.has(t.key)) return { ...base, decision: 'indeterminate', reason: ind.get(t.key)! };
    if (blockers.length) return { ...base, decision: 'indeterminate', reason: blockers.join('; ') };
    if (t.keep) return { ...base, decision: 'kept', reason: 'carries the keep-mark twopass.io/keep' };
    return { ...base, decision: 'unused', reason: rule.unused };
  });
  return { decisions, notes };
}

async function testRules(
  rules: readonly AnyRule[],
  worldFile: string,
  output: OutputMode,
  io: Io,
): Promise<number> {
  const world = WorldReader.fromFile(worldFile);
  let mismatches = 0;
  for (const rule of rules) {
    const { decisions, notes } = await decideWorld(rule, world, io.time.now());
    const expected = isCloudRule(rule)
      ? new WorldNeutron(world.objects, world.source).expectations(world.objects)
      : world.expectations(rule.target.ref);
    for (const d of decisions) {
      const want = expected.get(isCloudRule(rule) ? d.key : d.name);
      const ok = want === undefined || want === d.decision;
      if (!ok) mismatches++;
      if (output === 'json')
        io.out.write(`${JSON.stringify({ ...d, ...(want !== undefined ? { expected: want, ok } : {}) })}\n`);
      else
        io.out.write(
          `${ok ? '' : 'MISMATCH '}${d.decision.padEnd(13)} ${d.kind} ${d.name} [${d.key}]${d.reason ? `: ${d.reason}` : ''}${want !== undefined && !ok ? ` (expected ${want})` : ''}\n`,
        );
    }
    if (decisions.length === 0 && output !== 'json')
      io.out.write(`rule ${rule.name}: no target in ${worldFile}\n`);
    for (const n of notes) if (output !== 'json') io.out.write(`note ${n}\n`);
  }
  if (output !== 'json')
    io.out.write(
      'unused targets are candidates: a run deletes one only after two complete observations a grace apart, and a re-check\n',
    );
  if (mismatches > 0) {
    io.err.write(`twopass: rules test: ${mismatches} decision(s) differ from ${EXPECT}\n`);
    return EXIT.error;
  }
  return EXIT.ok;
}
