/**
 * The real producers on the test node: whereabouts' CNI IPAM plugin (and its pod controller
 * and reconciler), and Multus' thin plugin, as test/node/build.sh builds them; their CRDs as
 * they ship them. Two ways operators run them, each a CniSetup for startNode:
 * - `withMultus`: Multus is the node's CNI configuration, the cluster network (bridge tp0,
 *   host-local) its delegate; pods that ask for the NetworkAttachmentDefinition get a second
 *   interface on bridge tp1 with an address from whereabouts; Multus writes network-status.
 * - `whereaboutsPrimary`: no Multus; whereabouts is the IPAM of the cluster network itself.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { BRIDGE, BRIDGE_IP, type CniSetup, clusterNetwork } from './node.ts';

export const WHEREABOUTS_VERSION = 'v0.9.4';
export const MULTUS_VERSION = 'v3.9.3';
const CACHE = process.env.TWOPASS_CACHE ?? join(homedir(), '.cache/twopass');
export const producersDir = () =>
  join(CACHE, 'producers', `whereabouts-${WHEREABOUTS_VERSION}-multus-${MULTUS_VERSION}`);
export const producerBin = (name: 'whereabouts' | 'controlloop' | 'reconciler' | 'multus') =>
  join(producersDir(), name);

/** Why the producers cannot run here, or undefined. */
export function producersAvailable(): string | undefined {
  for (const b of ['whereabouts', 'controlloop', 'reconciler', 'multus'] as const)
    if (!existsSync(producerBin(b))) return `${b} is not built (test/node/build.sh producers)`;
  if (!existsSync(join(producersDir(), 'crds')))
    return "the producers' CRDs are not cached (test/node/build.sh producers)";
  return undefined;
}

/** whereabouts' IPPool and OverlappingRangeIPReservation CRDs and Multus' NetworkAttachmentDefinition CRD. */
export function producerCrds(): Record<string, unknown>[] {
  const d = join(producersDir(), 'crds');
  const docs = [
    'whereabouts.cni.cncf.io_ippools.yaml',
    'whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml',
    'multus-daemonset.yml',
  ].flatMap((f) => parseAllDocuments(readFileSync(join(d, f), 'utf8')).map((x) => x.toJS()));
  return docs.filter((x) => x?.kind === 'CustomResourceDefinition');
}

/** The bridge of the whereabouts network (Multus' second interface). */
export const WB_BRIDGE = 'tp1';
export const WB_NAD = 'wb';
/** IPPools live in the namespace of the plugin's kubeconfig context: kube-system by default. */
export const POOL_NS = 'kube-system';

/** whereabouts' flat configuration file: without it an ADD fails at once ("config file not found"). */
function whereaboutsConf(dir: string, kubeconfig: string): string {
  const path = join(dir, 'whereabouts.conf');
  writeFileSync(
    path,
    JSON.stringify({
      datastore: 'kubernetes',
      kubernetes: { kubeconfig },
      log_file: join(dir, 'whereabouts.log'),
      log_level: 'debug',
    }),
  );
  return path;
}

/**
 * The IPAM section whereabouts reads: a range (`range_start`..`range_end` inside it, both
 * included); `sleepForRace` is whereabouts' own knob for race tests: seconds its ADD and DEL
 * wait, holding its Lease, between reading the pool and writing it.
 */
export type WbRange = { range: string; rangeStart?: string; rangeEnd?: string; sleepForRace?: number };
const wbIpam = (r: WbRange, configuration_path: string, extra: Record<string, unknown> = {}) => ({
  type: 'whereabouts',
  range: r.range,
  ...(r.rangeStart ? { range_start: r.rangeStart } : {}),
  ...(r.rangeEnd ? { range_end: r.rangeEnd } : {}),
  ...(r.sleepForRace ? { sleep_for_race: r.sleepForRace } : {}),
  configuration_path,
  ...extra,
});

/** Multus (thin) delegating the cluster network; the whereabouts network is a NetworkAttachmentDefinition. */
export const withMultus: CniSetup = {
  plugins: { multus: producerBin('multus'), whereabouts: producerBin('whereabouts') },
  bridges: [WB_BRIDGE],
  conf: ({ dir, kubeconfig, binDir }) => {
    whereaboutsConf(dir, kubeconfig);
    return {
      '00-multus.conf': JSON.stringify({
        cniVersion: '0.4.0',
        name: 'multus-cni-network',
        type: 'multus',
        kubeconfig,
        binDir,
        cniDir: join(dir, 'multus'),
        confDir: join(dir, 'multus-conf'),
        logFile: join(dir, 'multus.log'),
        logLevel: 'debug',
        delegates: [clusterNetwork(dir)],
      }),
    };
  },
};

/** The NetworkAttachmentDefinition of a whereabouts network on tp1, for pods that ask for it. */
export function whereaboutsNad(dir: string, r: WbRange, namespace = 'default', name = WB_NAD) {
  return {
    apiVersion: 'k8s.cni.cncf.io/v1',
    kind: 'NetworkAttachmentDefinition',
    metadata: { name, namespace },
    spec: {
      config: JSON.stringify({
        cniVersion: '0.4.0',
        name,
        type: 'bridge',
        bridge: WB_BRIDGE,
        ipam: wbIpam(r, join(dir, 'whereabouts.conf')),
      }),
    },
  };
}

/** No Multus: whereabouts is the IPAM of the cluster network on tp0 (so no pod has a network-status). */
export function whereaboutsPrimary(r: WbRange): CniSetup {
  return {
    plugins: { whereabouts: producerBin('whereabouts') },
    conf: ({ dir, kubeconfig }) => ({
      '10-whereabouts.conflist': JSON.stringify({
        cniVersion: '0.4.0',
        name: 'twopass-wb',
        plugins: [
          {
            type: 'bridge',
            bridge: BRIDGE,
            isGateway: true,
            ipMasq: false,
            ipam: wbIpam(r, whereaboutsConf(dir, kubeconfig), {
              gateway: BRIDGE_IP,
              routes: [{ dst: '0.0.0.0/0' }],
            }),
          },
          { type: 'loopback' },
        ],
      }),
    }),
  };
}

/** The pool whereabouts names after its range (`10.89.0.0/24` is `10.89.0.0-24`). */
export const poolName = (range: string) => range.replace(/:/g, '-').replace('/', '-');

export const WB_IMAGE = 'localhost/whereabouts:test';
/**
 * whereabouts' pod controller and reconciler in an image of their own (`/controlloop`,
 * `/reconciler`, both static), built once with buildah into an OCI archive for containerd.
 * They read the cluster only as pods do (in-cluster config), and the reconciler its schedule
 * from `/cron-schedule/config`.
 */
export function whereaboutsImage(): string {
  const out = join(producersDir(), 'whereabouts-image.tar');
  if (existsSync(out)) return out;
  const sh = (...a: string[]) => execFileSync('buildah', a, { encoding: 'utf8' }).trim();
  const c = sh('from', 'scratch');
  try {
    const m = sh('mount', c);
    for (const b of ['controlloop', 'reconciler'] as const) copyFileSync(producerBin(b), join(m, b));
    execFileSync('chmod', ['0755', join(m, 'controlloop'), join(m, 'reconciler')]);
    mkdirSync(join(m, 'tmp'), { recursive: true });
    sh('umount', c);
    sh('commit', '--quiet', c, WB_IMAGE);
  } finally {
    sh('rm', c);
  }
  sh('push', '--quiet', WB_IMAGE, `oci-archive:${out}.part:${WB_IMAGE}`);
  execFileSync('mv', [`${out}.part`, out]);
  return out;
}

/**
 * whereabouts' own garbage collectors as its manifests run them, in kube-system: the pod
 * controller (`controlloop`, NODENAME of its node, the node's whereabouts configuration
 * mounted where the NetworkAttachmentDefinitions name it) and the standalone reconciler
 * (its cron expression from the whereabouts-config ConfigMap), with a ServiceAccount bound
 * to cluster-admin (a test's shortcut for whereabouts' ClusterRole).
 */
export function whereaboutsGc(nodeDir: string, cron = '* * * * *'): Record<string, unknown>[] {
  const ns = POOL_NS;
  const env = [
    { name: 'WHEREABOUTS_NAMESPACE', value: ns },
    { name: 'NODENAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
  ];
  const pod = (
    name: string,
    command: string[],
    volumes: Record<string, unknown>[],
    mounts: Record<string, unknown>[],
  ) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels: { app: name } },
    spec: {
      serviceAccountName: 'whereabouts',
      terminationGracePeriodSeconds: 0,
      containers: [{ name, image: WB_IMAGE, imagePullPolicy: 'Never', command, env, volumeMounts: mounts }],
      volumes,
    },
  });
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'whereabouts', namespace: ns } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'whereabouts-test' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' },
      subjects: [{ kind: 'ServiceAccount', name: 'whereabouts', namespace: ns }],
    },
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'whereabouts-config', namespace: ns },
      data: { 'cron-expression': cron },
    },
    pod(
      'whereabouts-controller',
      ['/controlloop', '-log-level', 'debug'],
      [{ name: 'node', hostPath: { path: nodeDir } }],
      [{ name: 'node', mountPath: nodeDir, readOnly: true }],
    ),
    pod(
      'whereabouts-reconciler',
      ['/reconciler', '-log-level', 'debug'],
      [
        {
          name: 'cron',
          configMap: { name: 'whereabouts-config', items: [{ key: 'cron-expression', path: 'config' }] },
        },
      ],
      [{ name: 'cron', mountPath: '/cron-schedule' }],
    ),
  ];
}
