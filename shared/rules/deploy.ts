/**
 * What a rule needs in a cluster: its RBAC (list on targets and evidence, get and delete
 * on targets, nothing else), and the manifests that run it as its own CronJob beside
 * the base install (ServiceAccount, the state Role every function has, the Events
 * ClusterRole, the rule in a ConfigMap, the CronJob).
 */
import { stringify } from 'yaml';
import { stateConfigMapNames } from '../state/configmap.ts';
import type { CloudRule } from './cloud-rule.ts';
import type { Rule } from './rule.ts';

export type PolicyRule = { apiGroups: string[]; resources: string[]; verbs: string[] };
type Manifest = Record<string, unknown>;

/** A rule of either kind, as its manifests need it. */
type AnyRule = Rule | CloudRule;
const isCloud = (r: AnyRule): r is CloudRule => 'cloud' in r;

/**
 * The rule's own permissions: one entry per resource, targets first. A cloud rule's targets
 * are in OpenStack (its credentials are the Secret's): it only lists its evidence here.
 */
export function ruleRbacRules(rule: AnyRule): PolicyRule[] {
  const out: PolicyRule[] = [];
  const at = new Map<string, PolicyRule>();
  const add = (group: string, resource: string, verbs: readonly string[]) => {
    const k = `${group}/${resource}`;
    const have = at.get(k);
    if (have) {
      for (const v of verbs) if (!have.verbs.includes(v)) have.verbs.push(v);
      return;
    }
    const r = { apiGroups: [group], resources: [resource], verbs: [...verbs] };
    at.set(k, r);
    out.push(r);
  };
  if (!isCloud(rule)) add(rule.target.ref.group, rule.target.ref.plural, ['list', 'get', 'delete']);
  for (const e of rule.evidence) add(e.ref.group, e.ref.plural, ['list']);
  return out;
}

const labels = (rule: AnyRule) => ({ 'app.kubernetes.io/name': 'twopass', 'twopass.io/function': rule.name });

/** The ClusterRole the rule needs and its binding to the rule's ServiceAccount. */
export function ruleRbac(rule: AnyRule, namespace: string): Manifest[] {
  const name = `twopass-${rule.name}`;
  return [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name, labels: labels(rule) },
      rules: ruleRbacRules(rule),
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name, labels: labels(rule) },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
      subjects: [{ kind: 'ServiceAccount', name, namespace }],
    },
  ];
}

/**
 * Every manifest that runs the rule as its own CronJob in `namespace` (beside the base
 * install). A cloud rule's pod reads clouds.yaml from the Secret `twopass-openstack` (cloud
 * `openstack`), as lbaas-ports does; its settings (projectId, cluster) and `enabled: true`
 * go in the base install's config, `functions.<rule>`.
 */
export function ruleManifests(rule: AnyRule, namespace: string, image: string): Manifest[] {
  const cloud = isCloud(rule);
  const name = `twopass-${rule.name}`;
  const sa = [{ kind: 'ServiceAccount', name, namespace }];
  const bind = (kind: string, role: string) => ({ apiGroup: 'rbac.authorization.k8s.io', kind, name: role });
  const schedule = rule.defaults.schedule ?? '*/10 * * * *';
  return [
    {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name, namespace, labels: labels(rule) },
      automountServiceAccountToken: true,
    },
    ...ruleRbac(rule, namespace),
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: `${name}-events`, labels: labels(rule) },
      // the runtime's, not the rule's: the Event each deletion leaves on the deleted object,
      // and kube-system's UID, by which a report names its cluster
      rules: [
        { apiGroups: [''], resources: ['events'], verbs: ['create'] },
        { apiGroups: [''], resources: ['namespaces'], resourceNames: ['kube-system'], verbs: ['get'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: `${name}-events`, labels: labels(rule) },
      roleRef: bind('ClusterRole', `${name}-events`),
      subjects: sa,
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: `${name}-state`, namespace, labels: labels(rule) },
      rules: [
        {
          apiGroups: [''],
          resources: ['configmaps'],
          resourceNames: stateConfigMapNames(rule.name),
          verbs: ['get', 'update', 'delete'],
        },
        { apiGroups: [''], resources: ['configmaps'], verbs: ['create'] },
        {
          apiGroups: ['coordination.k8s.io'],
          resources: ['leases'],
          resourceNames: [name],
          verbs: ['get', 'update'],
        },
        { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
        { apiGroups: ['batch'], resources: ['cronjobs'], resourceNames: [name], verbs: ['get'] },
        { apiGroups: ['batch'], resources: ['jobs'], verbs: ['get'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: `${name}-state`, namespace, labels: labels(rule) },
      roleRef: bind('Role', `${name}-state`),
      subjects: sa,
    },
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: `${name}-rule`, namespace, labels: labels(rule) },
      data: { 'rule.yaml': stringify(rule.file) },
    },
    {
      apiVersion: 'batch/v1',
      kind: 'CronJob',
      metadata: { name, namespace, labels: labels(rule) },
      spec: {
        schedule,
        concurrencyPolicy: 'Forbid',
        startingDeadlineSeconds: 300,
        successfulJobsHistoryLimit: 3,
        failedJobsHistoryLimit: 5,
        jobTemplate: {
          spec: {
            backoffLimit: 0,
            activeDeadlineSeconds: 900,
            template: {
              metadata: { labels: labels(rule) },
              spec: {
                serviceAccountName: name,
                restartPolicy: 'Never',
                securityContext: {
                  runAsNonRoot: true,
                  runAsUser: 65532,
                  runAsGroup: 65532,
                  fsGroup: 65532,
                  seccompProfile: { type: 'RuntimeDefault' },
                },
                containers: [
                  {
                    name: 'twopass',
                    image,
                    args: ['run', rule.name, '--config', '/etc/twopass/config.yaml', '--output', 'json'],
                    env: [
                      { name: 'TWOPASS_RULES', value: '/etc/twopass-rule/rule.yaml' },
                      {
                        name: 'TWOPASS_EVENT_NAMESPACE',
                        valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } },
                      },
                      {
                        name: 'TWOPASS_JOB_NAME',
                        valueFrom: {
                          fieldRef: { fieldPath: "metadata.labels['batch.kubernetes.io/job-name']" },
                        },
                      },
                      // As the built-in CronJobs: metrics for the shipped alerts, and the webhook.
                      {
                        name: 'TWOPASS_PUSHGATEWAY',
                        valueFrom: {
                          configMapKeyRef: { name: 'twopass-monitoring', key: 'pushgateway', optional: true },
                        },
                      },
                      {
                        name: 'TWOPASS_WEBHOOK_URL',
                        valueFrom: { secretKeyRef: { name: 'twopass-webhook', key: 'url', optional: true } },
                      },
                      ...(cloud
                        ? [
                            { name: 'OS_CLIENT_CONFIG_FILE', value: '/etc/openstack/clouds.yaml' },
                            { name: 'OS_CLOUD', value: 'openstack' },
                          ]
                        : []),
                    ],
                    resources: { requests: { cpu: '50m', memory: '128Mi' }, limits: { memory: '512Mi' } },
                    securityContext: {
                      allowPrivilegeEscalation: false,
                      readOnlyRootFilesystem: true,
                      capabilities: { drop: ['ALL'] },
                    },
                    volumeMounts: [
                      { name: 'config', mountPath: '/etc/twopass', readOnly: true },
                      { name: 'rule', mountPath: '/etc/twopass-rule', readOnly: true },
                      { name: 'tmp', mountPath: '/tmp' },
                      ...(cloud ? [{ name: 'openstack', mountPath: '/etc/openstack', readOnly: true }] : []),
                    ],
                  },
                ],
                volumes: [
                  { name: 'config', configMap: { name: 'twopass-config' } },
                  { name: 'rule', configMap: { name: `${name}-rule` } },
                  { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } },
                  // the Secret's files belong to fsGroup 65532 (0440): the pod's user reads clouds.yaml
                  ...(cloud
                    ? [{ name: 'openstack', secret: { secretName: 'twopass-openstack', defaultMode: 0o440 } }]
                    : []),
                ],
              },
            },
          },
        },
      },
    },
  ];
}

export function toYamlDocs(docs: readonly Manifest[]): string {
  return docs.map((d) => `---\n${stringify(d)}`).join('');
}
