/**
 * A rule whose targets live in OpenStack: Neutron ports or floating IPs of one project,
 * judged against Kubernetes lists (evidence) in the same snapshot, with the laws of every
 * function. Ownership is explicit and names the cluster: a rule says which tag, name or
 * description pattern makes a resource this cluster's own (with `${cluster}` in it), and a
 * resource of another project or another cluster is never judged.
 */
import { RE2JS } from 're2js';
import { z } from 'zod';
import { ConfigError } from '../errors.ts';
import { type Compiled, compile, evidenceNames } from './cel.ts';
import {
  type CloudEvidenceSpec,
  compileConditions,
  defaultsSchema,
  dnsLabel,
  type EvidenceSpec,
  evidenceSchema,
  expr,
  parseRuleDoc,
  type RuleFile,
} from './rule.ts';

export {
  CLOUD_EVIDENCE,
  CLOUD_TARGETS,
  type CloudCollection,
  type CloudEvidenceCollection,
} from './cloud-collections.ts';

import {
  CLOUD_EVIDENCE,
  CLOUD_TARGETS,
  type CloudCollection,
  type CloudEvidenceCollection,
} from './cloud-collections.ts';

// biome-ignore lint/suspicious/noTemplateCurlyInString: the placeholder rule files write, not a template
export const CLUSTER = '${cluster}';

/** Another OpenStack list of the rule's project as evidence: listed after the targets, indexed by `key`. */
const cloudEvidenceSchema = z
  .object({
    openstack: z.enum(
      Object.keys(CLOUD_EVIDENCE) as [CloudEvidenceCollection, ...CloudEvidenceCollection[]],
      {
        error: `expected one of ${Object.keys(CLOUD_EVIDENCE).join(', ')}`,
      },
    ),
    /** Server-side: only resources carrying every one of these tags are listed. */
    tags: z.array(z.string().min(1)).optional(),
    key: expr,
  })
  .strict();
type CloudEvidence = z.output<typeof cloudEvidenceSchema>;
type KubeEvidence = z.output<typeof evidenceSchema>;

const ownerSchema = z
  .object({
    tag: z.string().min(1).optional(),
    name: z.string().min(1).optional(),
    description: z.string().min(1).optional(),
    /** `KEY=VALUE`: a metadata entry (Cinder volumes), the value exact. */
    metadata: z
      .string()
      .regex(/^[^=]+=.+$/, { error: 'expected `KEY=VALUE` (a metadata key and its exact value)' })
      .optional(),
  })
  .strict()
  .refine((o) => Object.values(o).filter((v) => v !== undefined).length === 1, {
    error: `declare exactly one mark of ownership: \`tag\` (an exact tag), \`name\` or \`description\` (an RE2 pattern), or \`metadata\` (KEY=VALUE); each names the cluster as \`${CLUSTER}\``,
  });

export const cloudRuleSchema = z
  .object({
    apiVersion: z.literal('twopass.io/v1alpha1').optional(),
    kind: z.literal('Rule').optional(),
    name: z.string().regex(dnsLabel, { error: 'expected a lower-case name (letters, digits, `-`)' }).max(40),
    description: z.string().min(1),
    target: z
      .object({
        openstack: z.enum(Object.keys(CLOUD_TARGETS) as [CloudCollection, ...CloudCollection[]], {
          error: `expected one of ${Object.keys(CLOUD_TARGETS).join(', ')}`,
        }),
        /** Server-side: only resources carrying every one of these tags are listed. */
        tags: z.array(z.string().min(1)).optional(),
      })
      .strict(),
    owner: ownerSchema,
    /** `report-only`: found and reported (dry-run logs, reports, metrics), never deleted. */
    mode: z.enum(['delete', 'report-only']).optional(),
    /** Kubernetes lists, or OpenStack lists of the same project (`openstack: COLLECTION`). */
    evidence: z
      .record(
        z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: 'expected an identifier' }),
        z.unknown().transform((v, ctx) => {
          const cloud = v !== null && typeof v === 'object' && 'openstack' in v;
          const r = (cloud ? cloudEvidenceSchema : evidenceSchema).safeParse(v);
          if (r.success) return cloud ? { cloud: r.data as CloudEvidence } : { kube: r.data as KubeEvidence };
          for (const i of r.error.issues) ctx.addIssue({ ...i, input: v } as never);
          return z.NEVER;
        }),
      )
      .optional(),
    inUse: expr,
    indeterminate: expr.optional(),
    fingerprint: z.array(expr).optional(),
    unused: z.string().optional(),
    /**
     * security-groups only: before the group is deleted, the ports still in it (the list
     * `evidence.NAME[group id]`, an OpenStack ports list keyed by their security_groups) are
     * taken out of it, each with If-Match on its revision, when `when` (the port as `object`,
     * the evidence as `evidence`) holds for every one; otherwise the group is not deleted.
     */
    release: z
      .object({
        evidence: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: 'expected an evidence name' }),
        when: expr,
      })
      .strict()
      .optional(),
    /**
     * What the operator must say before the rule runs: each a setting (set to `true` under
     * `functions.NAME.settings`) and why it is asked, for a doubt no list can settle.
     */
    acknowledge: z
      .record(
        z.string().regex(/^[a-z][A-Za-z0-9]*$/, { error: 'expected a setting name (camelCase)' }),
        z.string().min(1),
      )
      .optional(),
    defaults: defaultsSchema.optional(),
  })
  .strict();

/** The settings every cloud rule has: an acknowledgement may not take one of their names. */
export const CLOUD_SETTING_NAMES = ['projectId', 'cluster', 'cloud', 'pageSize', 'clusterNameIsUnique'];

export type CloudOwnership = Readonly<{
  field: 'tag' | 'name' | 'description' | 'metadata';
  /** As the rule gives it, `${cluster}` included. */
  pattern: string;
  /** For logs and `rules check`. */
  describe: string;
  /**
   * Whether `o` is the cluster's own: null if not, else the named groups of the pattern
   * (the rule's conditions read them as `object.owner.NAME`).
   */
  owns: (
    o: Readonly<{
      tags?: readonly string[];
      name?: string | null;
      description?: string | null;
      metadata?: Readonly<Record<string, string>>;
    }>,
    cluster: string,
  ) => Record<string, string> | null;
  /** The tag to ask the server for (`tag` ownership). */
  serverTag: (cluster: string) => string | undefined;
}>;

/** A cloud rule, checked and compiled. */
export type CloudRule = Readonly<{
  cloud: true;
  name: string;
  description: string;
  source: string;
  collection: CloudCollection;
  kind: string;
  tags: readonly string[];
  owner: CloudOwnership;
  reportOnly: boolean;
  evidence: readonly EvidenceSpec[];
  /** OpenStack lists of the project as evidence (listed after the targets, like the Kubernetes ones). */
  cloudEvidence: readonly CloudEvidenceSpec[];
  inUse: Compiled;
  indeterminate?: Compiled | undefined;
  fingerprint: readonly Compiled[];
  unused: string;
  /** security-groups: the ports a group may be taken off before its delete (see `release` in the schema). */
  release?: Readonly<{ evidence: string; when: Compiled }> | undefined;
  /** Settings the operator must set to `true` before it runs, with why each is asked. */
  acknowledgements: readonly Readonly<{ setting: string; why: string }>[];
  defaults: NonNullable<RuleFile['defaults']>;
  /** The rule document as it was read (what `rules manifests` ships). */
  file: unknown;
}>;

/** True when a rule document targets OpenStack (`target.openstack`). */
export function isCloudRuleDoc(doc: unknown): boolean {
  const t = (doc as { target?: unknown } | null)?.target;
  return t !== null && typeof t === 'object' && 'openstack' in t;
}

function ownership(where: string, o: z.output<typeof ownerSchema>): CloudOwnership {
  const field =
    o.tag !== undefined
      ? 'tag'
      : o.name !== undefined
        ? 'name'
        : o.metadata !== undefined
          ? 'metadata'
          : 'description';
  const pattern = (o.tag ?? o.name ?? o.metadata ?? o.description)!;
  if (!pattern.includes(CLUSTER))
    throw new ConfigError(
      `${where}: \`owner.${field}\`: must name the cluster as \`${CLUSTER}\` (a resource another cluster made in the same project is not this one's)`,
    );
  if (field === 'tag')
    return {
      field,
      pattern,
      describe: `the tag ${pattern}`,
      owns: (x, cluster) => (x.tags?.includes(pattern.replaceAll(CLUSTER, cluster)) ? {} : null),
      serverTag: (cluster) => pattern.replaceAll(CLUSTER, cluster),
    };
  if (field === 'metadata') {
    const at = pattern.indexOf('=');
    const key = pattern.slice(0, at);
    const value = pattern.slice(at + 1);
    if (key.includes(CLUSTER))
      throw new ConfigError(
        `${where}: \`owner.metadata\`: the cluster belongs in the value, not the key (${pattern})`,
      );
    return {
      field,
      pattern,
      describe: `the metadata ${pattern}`,
      owns: (x, cluster) => (x.metadata?.[key] === value.replaceAll(CLUSTER, cluster) ? {} : null),
      serverTag: () => undefined,
    };
  }
  // the pattern is RE2 (linear time), anchored at both ends, the cluster name quoted into it
  const compiled = (cluster: string) =>
    RE2JS.compile(`^(?:${pattern.replaceAll(CLUSTER, RE2JS.quote(cluster))})$`);
  try {
    compiled('probe');
  } catch (err) {
    throw new ConfigError(
      `${where}: \`owner.${field}\`: invalid regular expression (RE2 syntax): ${(err as Error).message}`,
    );
  }
  const cache = new Map<string, RE2JS>();
  return {
    field,
    pattern,
    describe: `a ${field} matching ${pattern}`,
    owns: (x, cluster) => {
      let re = cache.get(cluster);
      if (!re) {
        re = compiled(cluster);
        cache.set(cluster, re);
      }
      const text = field === 'name' ? x.name : x.description;
      if (typeof text !== 'string') return null;
      const m = re.matcher(text);
      if (!m.matches()) return null;
      const groups: Record<string, string> = {};
      for (const name of Object.keys(re.namedGroups())) {
        const g = m.group(name);
        if (g !== null && g !== undefined) groups[name] = g;
      }
      return groups;
    },
    serverTag: () => undefined,
  };
}

/** Checks and compiles a cloud rule from its parsed YAML. */
export function compileCloudRule(doc: unknown, source: string): CloudRule {
  const f = parseRuleDoc(cloudRuleSchema, doc, source);
  const where = `rule ${f.name}`;
  const target = CLOUD_TARGETS[f.target.openstack];
  if (!target.deletes && f.mode !== 'report-only')
    throw new ConfigError(
      `${where}: \`target.openstack: ${f.target.openstack}\` is only ever reported: add \`mode: report-only\` (a deleted ${target.kind}'s data cannot be had back, so twopass never deletes one)`,
    );
  if (f.target.tags?.length && target.service !== 'Neutron')
    throw new ConfigError(`${where}: \`target.tags\`: ${target.service} ${f.target.openstack} have no tags`);
  for (const setting of Object.keys(f.acknowledge ?? {}))
    if (CLOUD_SETTING_NAMES.includes(setting))
      throw new ConfigError(
        `${where}: \`acknowledge.${setting}\`: \`${setting}\` is a setting of every cloud rule; name the acknowledgement otherwise`,
      );
  const kube: Record<string, KubeEvidence> = {};
  const cloud: Record<string, CloudEvidence> = {};
  for (const [name, e] of Object.entries(f.evidence ?? {})) {
    if (e.cloud?.tags?.length && CLOUD_EVIDENCE[e.cloud.openstack].service !== 'Neutron')
      throw new ConfigError(
        `${where}: \`evidence.${name}.tags\`: ${CLOUD_EVIDENCE[e.cloud.openstack].service} ${e.cloud.openstack} have no tags`,
      );
    if (e.cloud) cloud[name] = e.cloud;
    else if (e.kube) kube[name] = e.kube;
  }
  const compiled = compileConditions(where, {
    ...f,
    evidence: kube,
    cloudEvidence: cloud,
  });
  const { inUse, indeterminate, fingerprint, evidence } = compiled;
  let { cloudEvidence } = compiled;
  let release: CloudRule['release'];
  if (f.release) {
    const r = f.release;
    if (f.target.openstack !== 'security-groups')
      throw new ConfigError(
        `${where}: \`release\`: only a security group is taken off its ports before its delete (the target is ${f.target.openstack})`,
      );
    if (cloud[r.evidence]?.openstack !== 'ports')
      throw new ConfigError(
        `${where}: \`release.evidence\`: ${r.evidence} is not an evidence list of \`openstack: ports\` (keyed by the ports' security_groups)`,
      );
    const when = compile(`${where}: \`release.when\``, r.when, 'object+evidence', ['bool']);
    for (const n of evidenceNames(r.when))
      if (!(n in kube) && !(n in cloud))
        throw new ConfigError(
          `${where}: \`release.when\`: reads evidence.${n}, which the rule does not declare`,
        );
    release = { evidence: r.evidence, when };
    // the ports themselves are read at the delete: their list keeps its objects
    cloudEvidence = cloudEvidence.map((e) => (e.name === r.evidence ? { ...e, readsValues: true } : e));
  }
  return {
    cloud: true,
    name: f.name,
    description: f.description,
    source,
    collection: f.target.openstack,
    kind: CLOUD_TARGETS[f.target.openstack].kind,
    tags: f.target.tags ?? [],
    owner: ownership(where, f.owner),
    reportOnly: f.mode === 'report-only',
    evidence,
    cloudEvidence,
    inUse,
    indeterminate,
    fingerprint,
    unused: f.unused ?? `\`inUse\` is false: ${f.inUse.trim()}`,
    release,
    acknowledgements: Object.entries(f.acknowledge ?? {}).map(([setting, why]) => ({
      setting,
      why: why.trim(),
    })),
    defaults: f.defaults ?? {},
    file: doc,
  };
}
