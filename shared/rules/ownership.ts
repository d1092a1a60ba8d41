/**
 * Ownership stays narrow: a rule declares the mark that makes an object its own, kinds
 * that hold a cluster together are never targets, and other built-in kinds need an
 * explicit opt-in.
 */
import { ConfigError } from '../errors.ts';
import type { KubeObject } from '../kube/resources.ts';

/** The mark of a rule's targets, as the rule file declares it (exactly one key). */
export type Owner = Readonly<{ group?: string; label?: string; annotation?: string; ownerKind?: string }>;

/** Never a target, whatever a rule says: group → resources (`*`: every resource of the group). */
const FORBIDDEN: Readonly<Record<string, readonly string[]>> = {
  '': ['namespaces', 'nodes'],
  'apiextensions.k8s.io': ['customresourcedefinitions'],
  'apiregistration.k8s.io': ['apiservices'],
  'admissionregistration.k8s.io': ['*'],
  'rbac.authorization.k8s.io': ['*'],
};

/**
 * The API groups Kubernetes serves itself (the API reference of v1.36, plus the
 * aggregated `metrics.k8s.io`). A custom resource's group is anything else, even under
 * `k8s.io` (DANM's `danm.k8s.io`).
 */
const BUILT_IN_GROUPS = new Set([
  '',
  'admission.k8s.io',
  'admissionregistration.k8s.io',
  'apiextensions.k8s.io',
  'apiregistration.k8s.io',
  'apps',
  'authentication.k8s.io',
  'authorization.k8s.io',
  'autoscaling',
  'batch',
  'certificates.k8s.io',
  'coordination.k8s.io',
  'discovery.k8s.io',
  'events.k8s.io',
  'extensions',
  'flowcontrol.apiserver.k8s.io',
  'internal.apiserver.k8s.io',
  'metrics.k8s.io',
  'networking.k8s.io',
  'node.k8s.io',
  'policy',
  'rbac.authorization.k8s.io',
  'resource.k8s.io',
  'scheduling.k8s.io',
  'storage.k8s.io',
  'storagemigration.k8s.io',
]);

/** A group built into Kubernetes: one of its own, or any group without a dot (custom resources need one). */
export function builtInGroup(group: string): boolean {
  return BUILT_IN_GROUPS.has(group) || !group.includes('.');
}

export function forbidden(group: string, resource: string): boolean {
  const r = FORBIDDEN[group];
  return r !== undefined && (r.includes('*') || r.includes(resource));
}

export type Ownership = Readonly<{
  /** What the mark is, for `rules check` and `explain`. */
  describe: string;
  /** A label mark is also a server-side selector. */
  labelSelector?: string | undefined;
  /** True when the object carries the mark. */
  owns: (o: KubeObject) => boolean;
}>;

function keyValue(text: string): { key: string; value?: string } {
  const i = text.indexOf('=');
  return i < 0 ? { key: text } : { key: text.slice(0, i), value: text.slice(i + 1) };
}

const qualifiedName = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Checks a rule's target against the ownership laws; returns how its targets are recognised. */
export function checkOwnership(
  where: string,
  target: Readonly<{ group: string; resource: string }>,
  owner: Owner,
  allowBuiltIn: boolean,
): Ownership {
  const what = `${target.resource}${target.group ? `.${target.group}` : ''}`;
  if (forbidden(target.group, target.resource))
    throw new ConfigError(
      `${where}: \`target\`: ${what} is never a target (Namespaces, Nodes, CRDs, APIServices, admission webhooks and policies, and RBAC objects hold the cluster together)`,
    );
  const builtIn = builtInGroup(target.group);
  if (builtIn && !allowBuiltIn)
    throw new ConfigError(
      `${where}: \`target\`: ${what} is built into Kubernetes; a rule targets it only with \`allowBuiltIn: true\` and a label, annotation or ownerKind mark`,
    );
  if (owner.group !== undefined) {
    if (owner.group !== target.group)
      throw new ConfigError(
        `${where}: \`owner.group\`: \`${owner.group}\` is not the target's group \`${target.group}\``,
      );
    if (builtIn)
      throw new ConfigError(
        `${where}: \`owner.group\`: \`${owner.group || '(core)'}\` is built into Kubernetes and marks nothing as the rule's own; declare a label, annotation or ownerKind`,
      );
    return { describe: `the API group ${owner.group} (not built into Kubernetes)`, owns: () => true };
  }
  if (owner.label !== undefined || owner.annotation !== undefined) {
    const isLabel = owner.label !== undefined;
    const { key, value } = keyValue((owner.label ?? owner.annotation)!);
    const field = isLabel ? 'owner.label' : 'owner.annotation';
    if (!qualifiedName.test(key))
      throw new ConfigError(`${where}: \`${field}\`: expected \`key\` or \`key=value\`, got \`${key}\``);
    const read = (o: KubeObject) => (isLabel ? o.metadata.labels : o.metadata.annotations)?.[key];
    return {
      describe: `the ${isLabel ? 'label' : 'annotation'} ${key}${value !== undefined ? `=${value}` : ''}`,
      ...(isLabel ? { labelSelector: value !== undefined ? `${key}=${value}` : key } : {}),
      owns: (o) => {
        const v = read(o);
        return v !== undefined && (value === undefined || v === value);
      },
    };
  }
  const kind = owner.ownerKind!;
  if (!/^[A-Z][A-Za-z0-9]*$/.test(kind))
    throw new ConfigError(`${where}: \`owner.ownerKind\`: expected a Kind like \`Pod\`, got \`${kind}\``);
  return {
    describe: `an owner reference of kind ${kind}`,
    owns: (o) =>
      Array.isArray(o.metadata.ownerReferences) &&
      o.metadata.ownerReferences.some((r) => (r as { kind?: unknown } | null)?.kind === kind),
  };
}
