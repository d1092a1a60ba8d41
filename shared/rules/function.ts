/**
 * A rule as a function: one more function kind on the typed contract, not a second
 * engine. Targets are listed first, evidence after, every list complete or the run
 * decides nothing; each evidence list is an index (one O(1) lookup per target); an
 * expression that errors makes its target indeterminate; removal is a DELETE with
 * preconditions after a re-check against fresh evidence and a fresh read of the target.
 */
import { z } from 'zod';
import {
  type AnyFunction,
  checkFreshCount,
  defineFunction,
  deleteAsObserved,
  type FunctionDefaults,
  freshEvidence,
  GUARD_DEFAULTS,
  type KindSpec,
  keepMarked,
  kubeObject,
  MINUTE,
  namespacesSetting,
  type ObserveContext,
  pageSizeSetting,
  type RecheckResult,
  type RunContext,
  recreateAsWas,
} from '../contract/index.ts';
import { parseDuration } from '../engine/duration.ts';
import { NotInstalledError } from '../errors.ts';
import type { KubeReader, KubeReadWriter } from '../kube/ports.ts';
import { apiVersionOf, type KubeObject } from '../kube/resources.ts';
import { ruleAccess } from './access.ts';
import { toCel } from './cel.ts';
import {
  type EvidenceRead,
  type Indexes,
  listSpec,
  pacer,
  readEvidence,
  reportEvidence,
} from './evidence.ts';
import type { Rule } from './rule.ts';

export const ruleSettings = z
  .object({
    namespaces: namespacesSetting
      .optional()
      .describe("only targets in these namespaces (default: the rule's target.namespaces, else all)"),
    pageSize: pageSizeSetting.default(500).describe('items per list page'),
  })
  .strict();
type Settings = z.output<typeof ruleSettings>;

const objectData = z.object({
  namespace: z.string().min(1).optional(),
  name: z.string().min(1),
  uid: z.string().min(1),
  rv: z.string().min(1),
});
type ObjectData = z.output<typeof objectData>;

/** What a rule says of one target. */
export type RuleVerdict = Readonly<{ used: true } | { indeterminate: string } | { unused: true }>;

/** The rule's verdict on one object against evidence indexes: used, indeterminate (why), or unused. */
export function judge(
  rule: Pick<Rule, 'inUse' | 'indeterminate'>,
  object: unknown,
  indexes: Indexes,
): RuleVerdict {
  const vars = { object, evidence: indexes };
  const inUse = rule.inUse.evaluate(vars);
  if (!inUse.ok) return { indeterminate: `inUse: ${inUse.error}` };
  if (inUse.value === true) return { used: true };
  if (inUse.value !== false)
    return { indeterminate: `inUse returned ${describe(inUse.value)}, not true or false` };
  if (rule.indeterminate) {
    const r = rule.indeterminate.evaluate(vars);
    if (!r.ok) return { indeterminate: `indeterminate: ${r.error}` };
    if (typeof r.value === 'string') {
      if (r.value !== '') return { indeterminate: r.value };
    } else if (r.value !== null)
      return { indeterminate: `indeterminate returned ${describe(r.value)}, not a string or null` };
  }
  return { unused: true };
}

function describe(v: unknown): string {
  if (typeof v === 'string') return `"${v}"`;
  if (typeof v === 'bigint') return `${v}`;
  if (v === null || v === undefined) return 'null';
  return typeof v === 'object' ? (Array.isArray(v) ? 'a list' : 'a map') : `${v}`;
}

/** The identity and fingerprint of a target, or why it cannot have them. */
export function identify(
  rule: Rule,
  o: KubeObject,
  object: unknown,
): { key: string; fingerprint: string } | { error: string } {
  let key = o.metadata.uid;
  if (rule.identity) {
    const r = rule.identity.evaluate({ object });
    if (!r.ok) return { error: `identity: ${r.error}` };
    if (typeof r.value !== 'string' || r.value === '')
      return { error: `identity returned ${describe(r.value)}, not a non-empty string` };
    key = r.value;
  }
  const parts = [o.metadata.uid, o.metadata.resourceVersion];
  for (const f of rule.fingerprint) {
    const r = f.evaluate({ object });
    if (!r.ok) return { error: `${f.where.replace(/^rule [^:]+: /, '')}: ${r.error}` };
    parts.push(JSON.stringify(r.value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)));
  }
  return { key, fingerprint: parts.join('|') };
}

const where = (d: Readonly<{ namespace?: string | undefined; name: string }>) =>
  `${d.namespace ? `${d.namespace}/` : ''}${d.name}`;

export function ruleDefaults(rule: Pick<Rule, 'defaults'>): FunctionDefaults {
  const d = rule.defaults;
  const ms = (v: string | undefined) => (v === undefined ? undefined : parseDuration(v));
  const minAgeMs = ms(d.minAge);
  const accept = d.acceptEvidenceDropAfter;
  return {
    schedule: d.schedule ?? '*/10 * * * *',
    graceMs: ms(d.grace) ?? 10 * MINUTE,
    ...(minAgeMs !== undefined ? { minAgeMs } : {}),
    ...GUARD_DEFAULTS,
    ...(d.maxDeletions !== undefined ? { maxDeletions: d.maxDeletions } : {}),
    ...(d.maxDeletionPercent !== undefined ? { maxDeletionPercent: d.maxDeletionPercent } : {}),
    ...(d.minDeletionsForPercent !== undefined ? { minDeletionsForPercent: d.minDeletionsForPercent } : {}),
    ...(d.maxEvidenceDropPercent !== undefined ? { maxEvidenceDropPercent: d.maxEvidenceDropPercent } : {}),
    ...(accept === 'never'
      ? { acceptEvidenceDropAfterMs: undefined }
      : accept !== undefined
        ? { acceptEvidenceDropAfterMs: ms(accept) }
        : {}),
  } as FunctionDefaults;
}

type Kinds = Record<string, ObjectData>;

// Fresh evidence for the re-checks: listed after the decision, shared by the deletions of the
// run while younger than the run's bound (evidenceMaxAge), then listed again (law 6).
const freshLists = (rule: Rule, kube: KubeReader, ctx: RunContext<Settings>) =>
  freshEvidence(ctx, `rule:${rule.name}`, async () => {
    const ev = await readEvidence(rule, kube, ctx.settings.pageSize, ctx.signal);
    // held to the snapshot that decided (as the snapshot was to the run before it)
    for (const e of rule.evidence) checkFreshCount(ctx, `evidence.${e.name}`, ev.counts[e.name]?.count ?? 0);
    return ev;
  });

function observeOf(rule: Rule) {
  const ref = rule.target.ref;
  return async (kube: KubeReader, ctx: ObserveContext<Settings, Kinds>): Promise<void> => {
    const { pageSize } = ctx.settings;
    const namespaces = ctx.settings.namespaces ?? rule.target.namespaces;
    // A target kind that is not served (a CRD being re-installed, an aggregated API that flaps,
    // a server that is not Kubernetes) is doubt: nothing decided, nothing saved (exit 3).
    if (!(await kube.serves(ref.group, ref.version, ref.plural, ctx.signal)))
      throw new NotInstalledError(
        `rule ${rule.name}: its target ${ref.plural}.${apiVersionOf(ref)} is not served by the API server (a CRD being installed or removed, an API that flaps, or not a Kubernetes API server): nothing is decided and the state is kept`,
        { call: `discover ${ref.plural}.${apiVersionOf(ref)}` },
      );
    // Targets first: evidence listed after can only add holders.
    const targets = await listSpec(kube, rule.target, namespaces, pageSize, ctx.signal);
    ctx.source(ref.plural, 'target', targets);
    const ev = await readEvidence(rule, kube, pageSize, ctx.signal);
    reportEvidence(ctx, rule, ev);
    let foreign = 0;
    const pace = pacer(ctx.signal);
    for (const o of targets.items) {
      await pace();
      if (!rule.owner.owns(o)) foreign++;
      else judgeObject(rule, ctx, o, ev);
    }
    if (foreign > 0)
      ctx.note('targets.not-owned', {
        rule: rule.name,
        count: foreign,
        reason: `listed, but without ${rule.owner.describe}: not this rule's to judge`,
      });
  };
}

/** One owned target: its identity, and what the evidence says of it. */
function judgeObject(
  rule: Rule,
  ctx: ObserveContext<Settings, Kinds>,
  o: KubeObject,
  ev: EvidenceRead,
): void {
  const kindName = rule.target.ref.kind;
  const object = toCel(o);
  const data: ObjectData = {
    ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}),
    name: o.metadata.name,
    uid: o.metadata.uid,
    rv: o.metadata.resourceVersion,
  };
  const created = o.metadata.creationTimestamp ? Date.parse(o.metadata.creationTimestamp) : undefined;
  const init = {
    name: where(data),
    marks: [{ annotations: o.metadata.annotations }],
    ...(created !== undefined && !Number.isNaN(created) ? { createdAt: created } : {}),
  };
  const id = identify(rule, o, object);
  if ('error' in id) {
    ctx.unreadable(
      kindName,
      { ...init, key: `uid:${o.metadata.uid}`, fingerprint: o.metadata.uid },
      id.error,
    );
    return;
  }
  const v = ctx.target(kindName, { ...init, ...id, data });
  if (o.metadata.deletionTimestamp) {
    v.indeterminate('being deleted (deletionTimestamp is set)');
    return;
  }
  const verdict = judge(rule, object, ev.indexes);
  if ('used' in verdict) v.used();
  else if ('indeterminate' in verdict) v.indeterminate(verdict.indeterminate);
}

/** A confirmed target, re-checked on a fresh read and fresh evidence just before its delete. */
async function recheckObject(
  rule: Rule,
  kube: KubeReader,
  { key, data: d }: { key: string; data: ObjectData },
  ctx: RunContext<Settings>,
): Promise<RecheckResult> {
  const ref = rule.target.ref;
  const kindName = ref.kind;
  const o = await kube.get(ref, d.namespace, d.name, ctx.signal);
  if (!o) return { ok: false, reason: `${kindName} is already gone` };
  if (o.metadata.uid !== d.uid || o.metadata.resourceVersion !== d.rv)
    return { ok: false, reason: `${kindName} changed since the snapshot` };
  if (!rule.owner.owns(o))
    return { ok: false, reason: `${kindName} no longer carries ${rule.owner.describe}` };
  if (keepMarked([{ annotations: o.metadata.annotations }]))
    return { ok: false, reason: `${kindName} carries the keep-mark` };
  if (o.metadata.deletionTimestamp) return { ok: false, reason: `${kindName} is being deleted` };
  const object = toCel(o);
  const id = identify(rule, o, object);
  if ('error' in id || id.key !== key) return { ok: false, reason: `${kindName}'s identity changed` };
  const ev = (await freshLists(rule, kube, ctx)).value;
  if (ev.blockers.length > 0) return { ok: false, reason: `fresh evidence: ${ev.blockers.join('; ')}` };
  const verdict = judge(rule, object, ev.indexes);
  if ('used' in verdict) return { ok: false, reason: 'fresh evidence shows it in use' };
  if ('indeterminate' in verdict) return { ok: false, reason: `fresh evidence: ${verdict.indeterminate}` };
  return { ok: true, before: o };
}

/** Builds the function of a compiled rule. */
export function ruleFunction(rule: Rule): AnyFunction {
  const ref = rule.target.ref;
  const kindName = ref.kind;
  const kind: KindSpec<ObjectData, KubeReader, KubeReadWriter, Settings> = {
    data: objectData,
    note: `decided by rule ${rule.name} (${rule.source}): in use when ${rule.inUse.source.trim()}`,
    unused: rule.unused,
    removal: `DELETE the ${kindName} (preconditions: uid, resourceVersion)`,
    touches: (d) => [{ object: kubeObject(ref, d.namespace, d.name) }],
    recheck: (kube, t, ctx) => recheckObject(rule, kube, t, ctx),
    remove: (kube, { data: d }, ctx) => deleteAsObserved(kube, ref, d, `the ${kindName}`, ctx.signal),
    restore: (_reader, kube, tomb, ctx) => recreateAsWas(kube, ref, tomb.object, ctx),
    async confirmGone(kube, { data: d }, ctx) {
      const o = await kube.get(ref, d.namespace, d.name, ctx.signal);
      return !o || o.metadata.uid !== d.uid;
    },
    event(removed) {
      const d = removed[0]!.target.data;
      return {
        namespace: d.namespace ?? 'default',
        involved: {
          apiVersion: apiVersionOf(ref),
          kind: kindName,
          name: d.name,
          ...(d.namespace ? { namespace: d.namespace } : {}),
          uid: d.uid,
        },
        reason: 'TwopassRuleReclaimed',
        message: `twopass rule ${rule.name} deleted ${kindName} ${where(d)}: ${rule.unused}`,
      };
    },
  };

  return defineFunction<typeof ruleSettings, KubeReader, KubeReadWriter, Kinds>({
    name: rule.name,
    description: rule.description,
    settings: ruleSettings,
    defaults: ruleDefaults(rule),
    access: ruleAccess(rule),
    kinds: { [kindName]: kind },
    observe: observeOf(rule),
  });
}

export { type EvidenceRead, type Indexes, readEvidence } from './evidence.ts';
