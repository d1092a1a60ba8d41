/**
 * The SubjectAccessReview matrix: what each function's identity must be allowed and must be
 * refused, asked of the real API server. Run against the kustomize RBAC (deploy.test.ts)
 * and against the Helm chart's (helm.test.ts): both must answer the same.
 */
import * as assert from 'uvu/assert';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { IDENTITIES } from '../cluster/cluster.ts';

export type Check = {
  who: string;
  verb: string;
  group: string;
  resource: string;
  namespace?: string;
  name?: string;
  allowed: boolean;
};
export const CHECKS: Check[] = [];
for (const [fn, other] of [
  ['danm-endpoints', 'whereabouts-ips'],
  ['whereabouts-ips', 'danm-endpoints'],
] as const) {
  const check =
    (allowed: boolean) =>
    (verb: string, group: string, resource: string, namespace?: string, name?: string) =>
      CHECKS.push({
        who: fn,
        verb,
        group,
        resource,
        ...(namespace ? { namespace } : {}),
        ...(name ? { name } : {}),
        allowed,
      });
  const [allow, deny] = [check(true), check(false)];
  allow('list', '', 'pods');
  allow('get', '', 'configmaps', 'twopass-system', `twopass-${fn}`);
  allow('update', '', 'configmaps', 'twopass-system', `twopass-${fn}-s1-7`);
  allow('update', 'coordination.k8s.io', 'leases', 'twopass-system', `twopass-${fn}`);
  deny('delete', '', 'pods', 'default');
  deny('update', '', 'pods', 'default');
  deny('get', '', 'secrets', 'twopass-system');
  deny('list', '', 'secrets');
  deny('update', '', 'configmaps', 'twopass-system', `twopass-${other}`);
  deny('get', '', 'configmaps', 'twopass-system', `twopass-${other}`);
  deny('delete', '', 'configmaps', 'twopass-system', `twopass-${other}-s0-0`);
  deny('update', 'coordination.k8s.io', 'leases', 'twopass-system', `twopass-${other}`);
  deny('get', '', 'configmaps', 'kube-system', 'kube-root-ca.crt');
  deny('delete', '', 'namespaces');
  // a report names its cluster by kube-system's UID: that one namespace, read only
  allow('get', '', 'namespaces', undefined, 'kube-system');
  deny('get', '', 'namespaces', undefined, 'default');
  deny('update', '', 'namespaces', undefined, 'kube-system');
  deny('list', '', 'namespaces');
  deny('create', 'rbac.authorization.k8s.io', 'clusterrolebindings');
  allow('get', 'batch', 'cronjobs', 'twopass-system', `twopass-${fn}`);
  allow('get', 'batch', 'jobs', 'twopass-system', `twopass-${fn}-29400000`);
  deny('get', 'batch', 'cronjobs', 'twopass-system', `twopass-${other}`);
  deny('delete', 'batch', 'jobs', 'twopass-system', `twopass-${fn}-29400000`);
  deny('get', 'batch', 'jobs', 'default');
  if (fn === 'danm-endpoints') {
    allow('delete', 'danm.k8s.io', 'danmeps', 'default');
    allow('update', 'danm.k8s.io', 'danmnets', 'default');
    deny('delete', 'danm.k8s.io', 'danmnets', 'default');
    deny('patch', 'whereabouts.cni.cncf.io', 'ippools', 'default');
    deny('delete', 'whereabouts.cni.cncf.io', 'overlappingrangeipreservations', 'default');
  } else {
    allow('patch', 'whereabouts.cni.cncf.io', 'ippools', 'default');
    allow('delete', 'whereabouts.cni.cncf.io', 'overlappingrangeipreservations', 'default');
    deny('delete', 'whereabouts.cni.cncf.io', 'ippools', 'default');
    deny('delete', 'danm.k8s.io', 'danmeps', 'default');
    deny('update', 'danm.k8s.io', 'danmnets', 'default');
  }
}

for (const [verb, resource, allowed] of [
  ['list', 'services', true],
  ['get', 'services', true],
  ['delete', 'services', false],
  ['update', 'services', false],
  ['list', 'pods', false],
  ['get', 'secrets', false],
] as const) {
  CHECKS.push({ who: 'lbaas-ports', verb, group: '', resource, namespace: 'default', allowed });
}
// The controller's Deployment and pods, where it runs (kube-system by default), and nothing more.
for (const [verb, group, resource, namespace, allowed] of [
  ['get', 'apps', 'deployments', 'kube-system', true],
  ['list', 'apps', 'deployments', 'kube-system', true],
  ['list', '', 'pods', 'kube-system', true],
  ['update', 'apps', 'deployments', 'kube-system', false],
  ['delete', '', 'pods', 'kube-system', false],
  ['get', 'apps', 'deployments', 'default', false],
  ['get', '', 'namespaces', undefined, false],
] as const)
  CHECKS.push({ who: 'lbaas-ports', verb, group, resource, ...(namespace ? { namespace } : {}), allowed });
// a report names its cluster by kube-system's UID
CHECKS.push({
  who: 'lbaas-ports',
  verb: 'get',
  group: '',
  resource: 'namespaces',
  name: 'kube-system',
  allowed: true,
});
for (const [name, allowed] of [
  ['twopass-danm-endpoints', false],
  ['twopass-lbaas-ports', true],
] as const)
  CHECKS.push({
    who: 'lbaas-ports',
    verb: 'update',
    group: '',
    resource: 'configmaps',
    namespace: 'twopass-system',
    name,
    allowed,
  });

/** Asks every check; asserts each answer; returns the matrix as a table. */
export async function sarMatrix(kube: KubeHttpClient): Promise<string[]> {
  const SAR = {
    group: 'authorization.k8s.io',
    version: 'v1',
    plural: 'subjectaccessreviews',
    kind: 'SubjectAccessReview',
    namespaced: false,
  };
  const rows: string[] = [
    '| identity | verb | resource | namespace/name | allowed | expected |',
    '|---|---|---|---|---|---|',
  ];
  for (const c of CHECKS) {
    const id = IDENTITIES[c.who]!;
    const res = (await kube.create(SAR, {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      metadata: {},
      spec: {
        user: id.user,
        groups: id.groups,
        resourceAttributes: {
          verb: c.verb,
          group: c.group,
          resource: c.resource,
          ...(c.namespace ? { namespace: c.namespace } : {}),
          ...(c.name ? { name: c.name } : {}),
        },
      },
    })) as unknown as { status: { allowed: boolean } };
    const res2 = `${c.group ? `${c.resource}.${c.group}` : c.resource}`;
    rows.push(
      `| ${c.who} | ${c.verb} | ${res2} | ${c.namespace ?? '*'}/${c.name ?? '*'} | ${res.status.allowed} | ${c.allowed} |`,
    );
    assert.is(
      res.status.allowed,
      c.allowed,
      `${c.who} ${c.verb} ${res2} ${c.namespace ?? ''}/${c.name ?? ''}`,
    );
  }
  return rows;
}
