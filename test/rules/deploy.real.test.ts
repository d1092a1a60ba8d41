/**
 * A rule deployed as its own CronJob, on the real kube-apiserver: every manifest of
 * `twopass rules manifests` is accepted, and SubjectAccessReviews show its identity may
 * list targets and evidence, get and delete targets, and nothing else of the cluster.
 */
import * as assert from 'uvu/assert';
import { parseAllDocuments } from 'yaml';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import type { KubeObject, ResourceRef } from '../../shared/kube/resources.ts';
import { packageRoot } from '../../shared/paths.ts';
import { twopass } from '../helpers/cli.ts';
import { realTarget } from '../helpers/kube-target.ts';
import { targetSuite } from '../helpers/target-suite.ts';

const REFS: Record<string, ResourceRef> = {
  ServiceAccount: {
    group: '',
    version: 'v1',
    plural: 'serviceaccounts',
    kind: 'ServiceAccount',
    namespaced: true,
  },
  ConfigMap: { group: '', version: 'v1', plural: 'configmaps', kind: 'ConfigMap', namespaced: true },
  CronJob: { group: 'batch', version: 'v1', plural: 'cronjobs', kind: 'CronJob', namespaced: true },
  Role: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    plural: 'roles',
    kind: 'Role',
    namespaced: true,
  },
  RoleBinding: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    plural: 'rolebindings',
    kind: 'RoleBinding',
    namespaced: true,
  },
  ClusterRole: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    plural: 'clusterroles',
    kind: 'ClusterRole',
    namespaced: false,
  },
  ClusterRoleBinding: {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    plural: 'clusterrolebindings',
    kind: 'ClusterRoleBinding',
    namespaced: false,
  },
};
const SAR: ResourceRef = {
  group: 'authorization.k8s.io',
  version: 'v1',
  plural: 'subjectaccessreviews',
  kind: 'SubjectAccessReview',
  namespaced: false,
};

async function allowed(
  kube: KubeHttpClient,
  user: string,
  verb: string,
  group: string,
  resource: string,
  namespace?: string,
): Promise<boolean> {
  const r = (await kube.create(SAR, {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SubjectAccessReview',
    metadata: {},
    spec: {
      user,
      groups: ['system:serviceaccounts', 'system:authenticated'],
      resourceAttributes: { verb, group, resource, ...(namespace ? { namespace } : {}) },
    },
  })) as unknown as { status: { allowed: boolean } };
  return r.status.allowed;
}

const { it, run } = targetSuite('rules: deployed on the real kube-apiserver', realTarget);

it('`rules manifests` is accepted; its identity may do what the rule needs and nothing else', async (t, kube) => {
  const ns = await t.namespace();
  const r = twopass([
    'rules',
    'manifests',
    `${packageRoot()}/functions/rules/cilium-identities/rule.yaml`,
    '--namespace',
    ns,
  ]);
  assert.is(r.code, 0, r.err);
  for (const d of parseAllDocuments(r.out)) {
    const o = d.toJS() as KubeObject;
    const ref = REFS[o.kind!];
    assert.ok(ref, `a manifest of kind ${o.kind}`);
    if (!ref.namespaced) await kube.delete(ref, undefined, o.metadata.name);
    await kube.create(ref, o);
  }
  assert.ok(await kube.get(REFS.CronJob!, ns, 'twopass-cilium-identities'), 'the CronJob is there');
  const user = `system:serviceaccount:${ns}:twopass-cilium-identities`;
  const rows: [string, string, string, string | undefined, boolean][] = [
    ['list', 'cilium.io', 'ciliumidentities', undefined, true],
    ['get', 'cilium.io', 'ciliumidentities', undefined, true],
    ['delete', 'cilium.io', 'ciliumidentities', undefined, true],
    ['list', 'cilium.io', 'ciliumendpoints', 'default', true],
    ['list', 'cilium.io', 'ciliumendpointslices', undefined, true],
    ['delete', 'cilium.io', 'ciliumendpoints', 'default', false],
    ['get', 'cilium.io', 'ciliumendpoints', 'default', false],
    ['update', 'cilium.io', 'ciliumidentities', undefined, false],
    ['patch', 'cilium.io', 'ciliumidentities', undefined, false],
    ['delete', 'cilium.io', 'ciliumendpointslices', undefined, false],
    ['list', '', 'pods', 'default', false],
    ['delete', '', 'pods', 'default', false],
    ['list', '', 'secrets', undefined, false],
    ['delete', '', 'namespaces', undefined, false],
    ['create', '', 'events', 'default', true],
    ['update', '', 'configmaps', ns, false],
    ['create', 'coordination.k8s.io', 'leases', ns, true],
    ['create', 'rbac.authorization.k8s.io', 'clusterrolebindings', undefined, false],
  ];
  const table = ['| verb | resource | namespace | allowed | expected |', '|---|---|---|---|---|'];
  for (const [verb, group, resource, namespace, want] of rows) {
    const got = await allowed(kube, user, verb, group, resource, namespace);
    table.push(
      `| ${verb} | ${group ? `${resource}.${group}` : resource} | ${namespace ?? '*'} | ${got} | ${want} |`,
    );
    assert.is(got, want, `${verb} ${resource}.${group} ${namespace ?? ''}`);
  }
  console.log(`\n(cilium-identities, deployed by \`twopass rules manifests\`)\n${table.join('\n')}\n`);
});

it("a cloud rule's manifests: its identity lists its Kubernetes evidence and nothing else; its pod reads clouds.yaml from the Secret twopass-openstack", async (t, kube) => {
  const ns = await t.namespace();
  const r = twopass([
    'rules',
    'manifests',
    `${packageRoot()}/functions/rules/cpo-load-balancers/rule.yaml`,
    '--namespace',
    ns,
  ]);
  assert.is(r.code, 0, r.err);
  let cron: KubeObject | undefined;
  for (const d of parseAllDocuments(r.out)) {
    const o = d.toJS() as KubeObject;
    const ref = REFS[o.kind!];
    assert.ok(ref, `a manifest of kind ${o.kind}`);
    if (!ref.namespaced) await kube.delete(ref, undefined, o.metadata.name);
    await kube.create(ref, o);
    if (o.kind === 'CronJob') cron = o;
  }
  const pod = (cron!.spec as { jobTemplate: { spec: { template: { spec: Record<string, unknown> } } } })
    .jobTemplate.spec.template.spec as {
    containers: {
      env: { name: string; value?: string }[];
      volumeMounts: { name: string; mountPath: string }[];
    }[];
    volumes: { name: string; secret?: { secretName: string; defaultMode: number } }[];
    securityContext: { fsGroup: number };
  };
  const c = pod.containers[0]!;
  assert.is(c.env.find((e) => e.name === 'OS_CLIENT_CONFIG_FILE')?.value, '/etc/openstack/clouds.yaml');
  assert.is(c.env.find((e) => e.name === 'OS_CLOUD')?.value, 'openstack');
  assert.ok(c.volumeMounts.some((m) => m.name === 'openstack' && m.mountPath === '/etc/openstack'));
  const secret = pod.volumes.find((v) => v.name === 'openstack')?.secret;
  assert.equal(secret, { secretName: 'twopass-openstack', defaultMode: 0o440 });
  assert.is(pod.securityContext.fsGroup, 65532, 'the Secret is readable by the pod user');
  const user = `system:serviceaccount:${ns}:twopass-cpo-load-balancers`;
  const rows: [string, string, string, string | undefined, boolean][] = [
    ['list', '', 'services', 'default', true],
    ['list', '', 'services', undefined, true],
    ['get', '', 'services', 'default', false],
    ['delete', '', 'services', 'default', false],
    ['list', '', 'secrets', ns, false],
    ['get', '', 'secrets', ns, false],
    ['list', '', 'pods', 'default', false],
    ['create', '', 'events', 'default', true],
  ];
  for (const [verb, group, resource, namespace, want] of rows)
    assert.is(
      await allowed(kube, user, verb, group, resource, namespace),
      want,
      `${verb} ${resource}.${group} ${namespace ?? ''}`,
    );
});

run();
