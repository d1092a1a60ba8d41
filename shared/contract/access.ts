/**
 * What a function may do in a cluster, declared once beside its kinds (`FunctionSpec.access`).
 * Every deployment is generated from it: the kustomize components, the Helm chart's
 * `files/access.yaml`, `twopass rules manifests` (shared/deploy/manifests.ts). The act phase
 * holds each Kubernetes write to it as well (shared/runtime/guard.ts): a kind that writes a
 * resource its function did not declare is refused in the tests, before RBAC would refuse it
 * in a cluster.
 */

/** One rule of a Role or ClusterRole, as Kubernetes' RBAC API spells it. */
export type PolicyRule = Readonly<{
  apiGroups: readonly string[];
  resources: readonly string[];
  verbs: readonly string[];
  resourceNames?: readonly string[];
}>;

/**
 * Rules a function needs in one namespace that a setting names (the ch-k8s-lbaas controller's
 * Deployment and pods, where it runs). The namespace is `settings.<setting>.namespace`, or
 * `defaultNamespace` when the setting or its namespace is absent; a setting that is not an
 * object (`none`: there is nothing to read) needs no Role.
 */
export type NamespacedAccess = Readonly<{
  /** The Role's name is `twopass-<function>-<role>`. */
  role: string;
  /** Why the function reads there (a comment in the generated manifests). */
  why: string;
  setting: string;
  defaultNamespace: string;
  rules: readonly PolicyRule[];
}>;

export type Access = Readonly<{
  /** Its ClusterRole (the runtime adds what every run needs: RUNTIME_RULES). */
  cluster: readonly PolicyRule[];
  namespaced?: readonly NamespacedAccess[];
  /** It reads OpenStack credentials: clouds.yaml from a Secret, mounted in its pod. */
  openstack?: boolean;
}>;

/**
 * What every run needs besides its function's own rules: the Events a deletion leaves, and
 * kube-system's UID, by which a report names its cluster.
 */
export const RUNTIME_RULES: readonly PolicyRule[] = [
  { apiGroups: [''], resources: ['events'], verbs: ['create'] },
  { apiGroups: [''], resources: ['namespaces'], resourceNames: ['kube-system'], verbs: ['get'] },
];

/** The RBAC verb of a writer port's call (`replace` is an update, `jsonPatch` a patch). */
const VERB: Readonly<Record<string, string>> = {
  delete: 'delete',
  deleteWithPreconditions: 'delete',
  replace: 'update',
  replaceStatus: 'update',
  jsonPatch: 'patch',
  mergePatch: 'patch',
};

/** True when `rules` let `call` (a writer port's method) write `group/resource`. */
export function allows(rules: readonly PolicyRule[], group: string, resource: string, call: string): boolean {
  const verb = VERB[call] ?? call;
  const sub = call === 'replaceStatus' ? `${resource}/status` : resource;
  return rules.some(
    (r) =>
      (r.apiGroups.includes(group) || r.apiGroups.includes('*')) &&
      (r.resources.includes(sub) || r.resources.includes('*')) &&
      (r.verbs.includes(verb) || r.verbs.includes('*')) &&
      r.resourceNames === undefined,
  );
}
