/**
 * The manifests that run one function as its own CronJob, built from its declaration
 * (`access`, its default schedule) and nothing else: the kustomize components of the
 * built-in functions (`npm run manifests`), `twopass rules manifests`, and the Helm chart's
 * `files/access.yaml` all come from here, so that a function's RBAC is written once.
 */
import { stringify } from 'yaml';
import { type Access, type PolicyRule, RUNTIME_RULES } from '../contract/access.ts';
import { stateConfigMapNames } from '../state/configmap.ts';

export type Manifest = Record<string, unknown>;

/** What the manifests of one function are made from. */
export type Deployable = Readonly<{
  name: string;
  schedule: string;
  access: Access;
  /** A rule's file: shipped in a ConfigMap beside its CronJob, which runs it. */
  ruleFile?: unknown;
}>;

export type DeployOptions = Readonly<{
  namespace: string;
  image: string;
  /** The function's settings as deployed: where its namespaced Roles go. */
  settings?: Readonly<Record<string, unknown>>;
}>;

/** The namespace of a namespaced access: `settings.<setting>.namespace`, or none when the setting says there is nothing to read. */
export function accessNamespace(
  a: NonNullable<Access['namespaced']>[number],
  settings: Readonly<Record<string, unknown>> = {},
): string | undefined {
  const s = settings[a.setting];
  if (s === undefined) return a.defaultNamespace;
  if (s === null || typeof s !== 'object') return undefined;
  const ns = (s as { namespace?: unknown }).namespace;
  return typeof ns === 'string' && ns !== '' ? ns : a.defaultNamespace;
}

const labels = (name: string) => ({ 'app.kubernetes.io/name': 'twopass', 'twopass.io/function': name });
const roleRef = (kind: string, name: string) => ({ apiGroup: 'rbac.authorization.k8s.io', kind, name });

/** The function's ServiceAccount. */
export function serviceAccount(name: string, namespace: string): Manifest {
  return {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: `twopass-${name}`, namespace, labels: labels(name) },
    automountServiceAccountToken: true,
  };
}

/** Its state: only its own ConfigMaps (head, two slots of shards, tombstones, history) and Lease; its CronJob and Jobs for Events. */
export function stateRules(name: string): PolicyRule[] {
  const sa = `twopass-${name}`;
  return [
    {
      apiGroups: [''],
      resources: ['configmaps'],
      resourceNames: stateConfigMapNames(name),
      verbs: ['get', 'update', 'delete'],
    },
    { apiGroups: [''], resources: ['configmaps'], verbs: ['create'] },
    {
      apiGroups: ['coordination.k8s.io'],
      resources: ['leases'],
      resourceNames: [sa],
      verbs: ['get', 'update'],
    },
    { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
    // the Job (or CronJob) a run's Warning Events are about: read for its UID
    { apiGroups: ['batch'], resources: ['cronjobs'], resourceNames: [sa], verbs: ['get'] },
    { apiGroups: ['batch'], resources: ['jobs'], verbs: ['get'] },
  ];
}

/** Its ClusterRole: its own rules, then what every run needs. */
export const clusterRules = (access: Access): PolicyRule[] => [...access.cluster, ...RUNTIME_RULES];

/**
 * Every role of the function and its bindings to `subject` (its own ServiceAccount, or the
 * scheduler's, which runs every function under its roles).
 */
export function rbac(f: Deployable, o: DeployOptions, subject = `twopass-${f.name}`): Manifest[] {
  const name = `twopass-${f.name}`;
  const own = subject === name;
  const bindName = own ? name : `${subject}-${f.name}`;
  const sa = [{ kind: 'ServiceAccount', name: subject, namespace: o.namespace }];
  const meta = (n: string, namespace?: string) => ({
    name: n,
    ...(namespace ? { namespace } : {}),
    labels: labels(f.name),
  });
  const roles: Manifest[] = own
    ? [
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'Role',
          metadata: meta(`${name}-state`, o.namespace),
          rules: stateRules(f.name),
        },
      ]
    : [];
  const out: Manifest[] = [
    ...roles,
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: meta(`${bindName}-state`, o.namespace),
      roleRef: roleRef('Role', `${name}-state`),
      subjects: sa,
    },
    ...(own
      ? [
          {
            apiVersion: 'rbac.authorization.k8s.io/v1',
            kind: 'ClusterRole',
            metadata: meta(name),
            rules: clusterRules(f.access),
          },
        ]
      : []),
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: meta(bindName),
      roleRef: roleRef('ClusterRole', name),
      subjects: sa,
    },
  ];
  for (const a of f.access.namespaced ?? []) {
    const ns = accessNamespace(a, o.settings);
    if (ns === undefined) continue;
    if (own)
      out.push({
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'Role',
        metadata: meta(`${name}-${a.role}`, ns),
        rules: a.rules,
      });
    out.push({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: meta(`${bindName}-${a.role}`, ns),
      roleRef: roleRef('Role', `${name}-${a.role}`),
      subjects: sa,
    });
  }
  return out;
}

/** The environment of every twopass container (metrics for the alerts, the webhook, Events). */
export function runEnv(f: Deployable): Manifest[] {
  return [
    ...(f.ruleFile !== undefined ? [{ name: 'TWOPASS_RULES', value: '/etc/twopass-rule/rule.yaml' }] : []),
    { name: 'TWOPASS_EVENT_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
    // Warning Events of a run that did not end ok go on this Job (with its UID)
    {
      name: 'TWOPASS_JOB_NAME',
      valueFrom: { fieldRef: { fieldPath: "metadata.labels['batch.kubernetes.io/job-name']" } },
    },
    {
      name: 'TWOPASS_PUSHGATEWAY',
      valueFrom: { configMapKeyRef: { name: 'twopass-monitoring', key: 'pushgateway', optional: true } },
    },
    {
      name: 'TWOPASS_WEBHOOK_URL',
      valueFrom: { secretKeyRef: { name: 'twopass-webhook', key: 'url', optional: true } },
    },
    ...(f.access.openstack
      ? [
          { name: 'OS_CLIENT_CONFIG_FILE', value: '/etc/openstack/clouds.yaml' },
          { name: 'OS_CLOUD', value: 'openstack' },
        ]
      : []),
  ];
}

/** The CronJob that runs the function (hardened: non-root, read-only root, no capabilities). */
export function cronJob(f: Deployable, o: DeployOptions): Manifest {
  const name = `twopass-${f.name}`;
  const rule = f.ruleFile !== undefined;
  const openstack = f.access.openstack === true;
  return {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name, namespace: o.namespace, labels: labels(f.name) },
    spec: {
      schedule: f.schedule,
      concurrencyPolicy: 'Forbid',
      startingDeadlineSeconds: 300,
      successfulJobsHistoryLimit: 3,
      failedJobsHistoryLimit: 5,
      jobTemplate: {
        spec: {
          backoffLimit: 0,
          activeDeadlineSeconds: 900,
          template: {
            metadata: { labels: labels(f.name) },
            spec: {
              serviceAccountName: name,
              restartPolicy: 'Never',
              securityContext: {
                runAsNonRoot: true,
                runAsUser: 65532,
                runAsGroup: 65532,
                // a Secret's files belong to this group (0440): the pod's user reads clouds.yaml
                fsGroup: 65532,
                seccompProfile: { type: 'RuntimeDefault' },
              },
              containers: [
                {
                  name: 'twopass',
                  image: o.image,
                  args: ['run', f.name, '--config', '/etc/twopass/config.yaml', '--output', 'json'],
                  env: runEnv(f),
                  resources: { requests: { cpu: '50m', memory: '128Mi' }, limits: { memory: '512Mi' } },
                  securityContext: {
                    allowPrivilegeEscalation: false,
                    readOnlyRootFilesystem: true,
                    capabilities: { drop: ['ALL'] },
                  },
                  volumeMounts: [
                    { name: 'config', mountPath: '/etc/twopass', readOnly: true },
                    ...(rule ? [{ name: 'rule', mountPath: '/etc/twopass-rule', readOnly: true }] : []),
                    { name: 'tmp', mountPath: '/tmp' },
                    ...(openstack
                      ? [{ name: 'openstack', mountPath: '/etc/openstack', readOnly: true }]
                      : []),
                  ],
                },
              ],
              volumes: [
                { name: 'config', configMap: { name: 'twopass-config' } },
                ...(rule ? [{ name: 'rule', configMap: { name: `${name}-rule` } }] : []),
                { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } },
                ...(openstack
                  ? [{ name: 'openstack', secret: { secretName: 'twopass-openstack', defaultMode: 0o440 } }]
                  : []),
              ],
            },
          },
        },
      },
    },
  };
}

/** Everything that runs the function as its own CronJob beside the base install. */
export function functionManifests(f: Deployable, o: DeployOptions): Manifest[] {
  return [
    serviceAccount(f.name, o.namespace),
    ...rbac(f, o),
    ...(f.ruleFile !== undefined
      ? [
          {
            apiVersion: 'v1',
            kind: 'ConfigMap',
            metadata: { name: `twopass-${f.name}-rule`, namespace: o.namespace, labels: labels(f.name) },
            data: { 'rule.yaml': stringify(f.ruleFile) },
          },
        ]
      : []),
    cronJob(f, o),
  ];
}

export function toYamlDocs(docs: readonly Manifest[]): string {
  return docs.map((d) => `---\n${stringify(d)}`).join('');
}
