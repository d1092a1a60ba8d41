/**
 * The rule file: one user-defined function. Read from YAML (a file, or inline in the
 * config), checked with zod, its expressions compiled and its ownership checked when it
 * loads; every error names the rule and the field (and the position in an expression).
 */
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { describeValue, namespacesSetting } from '../contract/settings.ts';
import { GRACE_FLOOR_MS, parseDuration } from '../engine/duration.ts';
import { ConfigError, issuesText, yamlMessage } from '../errors.ts';
import type { ResourceRef } from '../kube/resources.ts';
import {
  type Compiled,
  compile,
  evidenceNames,
  readsEvidenceValues,
  readsOnlyMetadata,
  type Scope,
} from './cel.ts';
import { checkOwnership, type Owner, type Ownership } from './ownership.ts';

export const dnsLabel = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export const expr = z
  .string({ error: (i) => `expected a CEL expression (a string), got ${describeValue(i.input)}` })
  .min(1, { error: 'expected a CEL expression, got an empty string' });

const duration = z.string().refine((v) => parseDuration(v) !== undefined, {
  error: (i) => `expected a duration like \`15m\`, got ${describeValue(i.input)}`,
});

/** A rule's default grace or minAge: at least the floor (a config with allowShortGrace may shorten it for a test). */
const defaultGrace = duration.refine((v) => parseDuration(v)! >= GRACE_FLOOR_MS, {
  error: (i) =>
    `expected at least \`1m\`, got ${describeValue(i.input)}: a rule's default is never shorter than the floor (a config with \`allowShortGrace: true\` may set \`functions.<rule>.grace\` lower, for a test)`,
});

/** Which objects a list reads: group, version, resource, scope and selectors. */
const resource = z
  .object({
    group: z.string({ error: 'expected the API group (`""` for the core group)' }),
    version: z.string().regex(/^v\d+((alpha|beta)\d+)?$/, { error: 'expected a version like `v1`' }),
    resource: z
      .string()
      .regex(dnsLabel, { error: 'expected the plural resource name, lower case (like `pods`)' }),
    kind: z.string().regex(/^[A-Z][A-Za-z0-9]*$/, { error: 'expected a Kind like `Pod`' }),
    namespaced: z.boolean({ error: 'expected true or false (is the resource namespaced?)' }),
    namespaces: namespacesSetting.optional(),
    labelSelector: z.string().optional(),
    fieldSelector: z.string().optional(),
    /** Default: true when the rule's expressions read only `object.metadata` of this list. */
    metadataOnly: z.boolean().optional(),
  })
  .strict();

export const evidenceSchema = resource.extend({
  /** The index key of each evidence object: a string, an int, a list of them, or null (holds nothing). */
  key: expr,
  /** A resource the server does not serve is an empty, complete list (else nothing is decided). */
  optional: z.boolean().optional(),
});

const ownerSchema = z
  .object({
    group: z.string().optional(),
    label: z.string().optional(),
    annotation: z.string().optional(),
    ownerKind: z.string().optional(),
  })
  .strict()
  .refine((o) => Object.values(o).filter((v) => v !== undefined).length === 1, {
    error: 'declare exactly one mark: `group`, `label`, `annotation` or `ownerKind`',
  });

/** A rule's defaults for its function (schedule, grace, guards). */
export const defaultsSchema = z
  .object({
    schedule: z.string().optional(),
    grace: defaultGrace.optional(),
    minAge: defaultGrace.optional(),
    maxDeletions: z.number().int().min(0).optional(),
    maxDeletionPercent: z.number().min(0).max(100).optional(),
    minDeletionsForPercent: z.number().int().min(0).optional(),
    maxEvidenceDropPercent: z.number().min(0).max(100).optional(),
    acceptEvidenceDropAfter: z.union([duration, z.literal('never')]).optional(),
  })
  .strict();

export const ruleSchema = z
  .object({
    apiVersion: z.literal('twopass.io/v1alpha1').optional(),
    kind: z.literal('Rule').optional(),
    name: z.string().regex(dnsLabel, { error: 'expected a lower-case name (letters, digits, `-`)' }).max(40),
    description: z.string().min(1),
    target: resource,
    owner: ownerSchema,
    /** Built-in kinds other than the forbidden ones are targets only with this opt-in. */
    allowBuiltIn: z.boolean().optional(),
    evidence: z
      .record(
        z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: 'expected an identifier' }),
        evidenceSchema,
      )
      .optional(),
    inUse: expr,
    indeterminate: expr.optional(),
    identity: expr.optional(),
    fingerprint: z.array(expr).optional(),
    /** Why a target is unused, for reviewers' reports (default: the inUse expression is false). */
    unused: z.string().optional(),
    defaults: defaultsSchema.optional(),
  })
  .strict();

export type RuleFile = z.output<typeof ruleSchema>;

export type ListSpec = Readonly<{
  ref: ResourceRef;
  namespaces?: readonly string[] | undefined;
  labelSelector?: string | undefined;
  fieldSelector?: string | undefined;
  metadataOnly: boolean;
}>;

export type EvidenceSpec = ListSpec &
  Readonly<{
    name: string;
    key: Compiled;
    optional: boolean;
    /** A condition reads the evidence objects (`evidence.NAME[KEY]`), not only their keys. */
    readsValues: boolean;
  }>;

/** A rule, checked and compiled: what the rule function runs. */
export type Rule = Readonly<{
  name: string;
  description: string;
  source: string;
  target: ListSpec;
  owner: Ownership;
  evidence: readonly EvidenceSpec[];
  inUse: Compiled;
  indeterminate?: Compiled | undefined;
  identity?: Compiled | undefined;
  fingerprint: readonly Compiled[];
  unused: string;
  defaults: NonNullable<RuleFile['defaults']>;
  file: RuleFile;
}>;

const refOf = (r: z.output<typeof resource>): ResourceRef => ({
  group: r.group,
  version: r.version,
  plural: r.resource,
  kind: r.kind,
  namespaced: r.namespaced,
});

/** The fields of a rule both kinds of target share, as a rule file gives them. */
export type ConditionFields = Readonly<{
  inUse: string;
  indeterminate?: string | undefined;
  identity?: string | undefined;
  fingerprint?: readonly string[] | undefined;
  evidence?: Readonly<Record<string, z.output<typeof evidenceSchema>>> | undefined;
  /** A cloud rule's evidence from OpenStack lists (by collection, of the rule's project). */
  cloudEvidence?: Readonly<Record<string, CloudEvidenceFields>> | undefined;
}>;

/** A cloud list as evidence, as a rule file gives it. */
export type CloudEvidenceFields = Readonly<{
  openstack: string;
  tags?: readonly string[] | undefined;
  key: string;
}>;

/** A cloud list as evidence, compiled: listed after the targets, in the rule's project. */
export type CloudEvidenceSpec = Readonly<{
  name: string;
  collection: string;
  tags: readonly string[];
  key: Compiled;
  readsValues: boolean;
}>;

/**
 * Compiles a rule's conditions and evidence, refusing what could never decide well: a
 * constant inUse, a scan of a whole evidence index, evidence read but not declared.
 */
export function compileConditions(where: string, f: ConditionFields) {
  const c = (field: string, src: string, scope: Scope, accepts: readonly string[]) =>
    compile(`${where}: \`${field}\``, src, scope, accepts);
  const inUse = c('inUse', f.inUse, 'object+evidence', ['bool']);
  const indeterminate = f.indeterminate
    ? c('indeterminate', f.indeterminate, 'object+evidence', ['string', 'null'])
    : undefined;
  const identity = f.identity ? c('identity', f.identity, 'object', ['string']) : undefined;
  const fingerprint = (f.fingerprint ?? []).map((x, i) =>
    c(`fingerprint.${i}`, x, 'object', ['string', 'int', 'bool', 'double', 'uint']),
  );
  if (inUse.reads.size === 0)
    throw new ConfigError(
      `${where}: \`inUse\`: \`${f.inUse.trim()}\` reads neither the object nor the evidence: a constant would call every target ${inUse.source.trim() === 'false' ? 'unused' : 'the same'}; write what use looks like (e.g. \`object.metadata.uid in evidence.pods\`)`,
    );
  for (const [field, x] of [
    ['inUse', inUse],
    ['indeterminate', indeterminate],
  ] as const)
    if (x?.scansEvidence)
      throw new ConfigError(
        `${where}: \`${field}\`: iterates a whole evidence index, so every target would scan every evidence object (150,000 pods x 150,000 targets); look the target up by key instead: \`KEY in evidence.NAME\` or \`evidence.NAME[KEY]\` (see README, "Write your own rule")`,
      );
  const conditions = [f.inUse, ...(f.indeterminate ? [f.indeterminate] : [])];
  const declared = new Set([...Object.keys(f.evidence ?? {}), ...Object.keys(f.cloudEvidence ?? {})]);
  for (const [field, src] of [
    ['inUse', f.inUse],
    ['indeterminate', f.indeterminate],
  ] as const)
    for (const n of evidenceNames(src ?? ''))
      if (!declared.has(n))
        throw new ConfigError(
          `${where}: \`${field}\`: reads evidence.${n}, which the rule does not declare (declared: ${[...declared].join(', ') || 'none'})`,
        );

  const evidence = Object.entries(f.evidence ?? {}).map(([name, e]): EvidenceSpec => {
    const key = c(`evidence.${name}.key`, e.key, 'object', ['string', 'int', 'list', 'null']);
    const readsValues = conditions.some((s) => readsEvidenceValues(s, name));
    return {
      name,
      ref: refOf(e),
      namespaces: e.namespaces,
      labelSelector: e.labelSelector,
      fieldSelector: e.fieldSelector,
      metadataOnly: e.metadataOnly ?? (readsOnlyMetadata([e.key]) && !readsValues),
      key,
      optional: e.optional ?? false,
      readsValues,
    };
  });
  const cloudEvidence = Object.entries(f.cloudEvidence ?? {}).map(
    ([name, e]): CloudEvidenceSpec => ({
      name,
      collection: e.openstack,
      tags: e.tags ?? [],
      key: c(`evidence.${name}.key`, e.key, 'object', ['string', 'int', 'list', 'null']),
      readsValues: conditions.some((s) => readsEvidenceValues(s, name)),
    }),
  );
  return { inUse, indeterminate, identity, fingerprint, evidence, cloudEvidence, conditions };
}

/** A rule document checked against its schema; an error names the rule (or where it came from) and the field. */
export function parseRuleDoc<S extends z.ZodType>(schema: S, doc: unknown, source: string): z.output<S> {
  const named =
    doc && typeof doc === 'object' && typeof (doc as { name?: unknown }).name === 'string'
      ? `rule ${(doc as { name: string }).name}`
      : `rule in ${source}`;
  const parsed = schema.safeParse(doc);
  if (!parsed.success) throw new ConfigError(issuesText(parsed.error, { where: named, root: '(rule)' }));
  return parsed.data;
}

/** Checks and compiles a rule from its parsed YAML; `source` names where it came from. */
export function compileRule(doc: unknown, source: string): Rule {
  const f = parseRuleDoc(ruleSchema, doc, source);
  const where = `rule ${f.name}`;
  const { inUse, indeterminate, identity, fingerprint, evidence, conditions } = compileConditions(where, f);
  const owner = checkOwnership(where, f.target, f.owner as Owner, f.allowBuiltIn ?? false);
  const targetReads = [...conditions, ...(f.identity ? [f.identity] : []), ...(f.fingerprint ?? [])];
  return {
    name: f.name,
    description: f.description,
    source,
    target: {
      ref: refOf(f.target),
      namespaces: f.target.namespaces,
      labelSelector: [f.target.labelSelector, owner.labelSelector].filter(Boolean).join(',') || undefined,
      fieldSelector: f.target.fieldSelector,
      metadataOnly: f.target.metadataOnly ?? readsOnlyMetadata(targetReads),
    },
    owner,
    evidence,
    inUse,
    indeterminate,
    identity,
    fingerprint,
    unused: f.unused ?? `\`inUse\` is false: ${f.inUse.trim()}`,
    defaults: f.defaults ?? {},
    file: f,
  };
}

/** The rule documents of YAML text (one rule per document). */
export function parseRuleDocs(text: string, source: string): unknown[] {
  let docs: unknown[];
  try {
    docs = yamlDocs(text);
  } catch (err) {
    throw new ConfigError(`rule file ${source}: not valid YAML: ${yamlMessage(err)}`, { cause: err });
  }
  if (docs.length === 0) throw new ConfigError(`rule file ${source}: no rule in it`);
  return docs;
}

/** Parses rule YAML text of Kubernetes rules (one rule per document). */
export function parseRuleText(text: string, source: string): Rule[] {
  return parseRuleDocs(text, source).map((d) => compileRule(d, source));
}

function yamlDocs(text: string): unknown[] {
  const out: unknown[] = [];
  for (const d of parseAllDocuments(text)) {
    if ('errors' in d && d.errors.length > 0) throw d.errors[0];
    const v = d.toJS();
    if (v !== null && v !== undefined) out.push(v);
  }
  return out;
}

/** The rule documents of a file. */
export function readRuleDocs(path: string): unknown[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`rule file ${path}: cannot read: ${(err as Error).message}`, { cause: err });
  }
  return parseRuleDocs(text, path);
}

/** Reads and compiles the Kubernetes rules of a file. */
export function loadRuleFile(path: string): Rule[] {
  return readRuleDocs(path).map((d) => compileRule(d, path));
}
