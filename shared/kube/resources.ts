/** Resource references and REST paths, for the core group and any other group. */

export type ResourceRef = Readonly<{
  group: string; // '' for the core group
  version: string;
  plural: string;
  kind: string;
  namespaced: boolean;
}>;

export type KubeObject = {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    uid: string;
    resourceVersion: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    generateName?: string;
    ownerReferences?: unknown[];
    [k: string]: unknown;
  };
  [k: string]: unknown;
};

export const PODS: ResourceRef = { group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true };
export const NODES: ResourceRef = {
  group: '',
  version: 'v1',
  plural: 'nodes',
  kind: 'Node',
  namespaced: false,
};
export const SERVICES: ResourceRef = {
  group: '',
  version: 'v1',
  plural: 'services',
  kind: 'Service',
  namespaced: true,
};
export const CONFIGMAPS: ResourceRef = {
  group: '',
  version: 'v1',
  plural: 'configmaps',
  kind: 'ConfigMap',
  namespaced: true,
};
export const EVENTS: ResourceRef = {
  group: '',
  version: 'v1',
  plural: 'events',
  kind: 'Event',
  namespaced: true,
};
export const NAMESPACES: ResourceRef = {
  group: '',
  version: 'v1',
  plural: 'namespaces',
  kind: 'Namespace',
  namespaced: false,
};
export const LEASES: ResourceRef = {
  group: 'coordination.k8s.io',
  version: 'v1',
  plural: 'leases',
  kind: 'Lease',
  namespaced: true,
};

export const JOBS: ResourceRef = {
  group: 'batch',
  version: 'v1',
  plural: 'jobs',
  kind: 'Job',
  namespaced: true,
};
export const CRONJOBS: ResourceRef = {
  group: 'batch',
  version: 'v1',
  plural: 'cronjobs',
  kind: 'CronJob',
  namespaced: true,
};

export function apiVersionOf(ref: ResourceRef): string {
  return ref.group === '' ? ref.version : `${ref.group}/${ref.version}`;
}

export function collectionPath(ref: ResourceRef, namespace?: string): string {
  const base = ref.group === '' ? `/api/${ref.version}` : `/apis/${ref.group}/${ref.version}`;
  if (ref.namespaced && namespace !== undefined) {
    return `${base}/namespaces/${encodeURIComponent(namespace)}/${ref.plural}`;
  }
  return `${base}/${ref.plural}`;
}

export function objectPath(ref: ResourceRef, namespace: string | undefined, name: string): string {
  if (ref.namespaced && namespace === undefined) throw new Error(`${ref.kind} ${name}: namespace required`);
  return `${collectionPath(ref, namespace)}/${encodeURIComponent(name)}`;
}

export function describe(ref: ResourceRef, namespace: string | undefined, name?: string): string {
  const where = namespace !== undefined ? `${namespace}/` : '';
  return name === undefined ? `${ref.plural}.${apiVersionOf(ref)}` : `${ref.kind} ${where}${name}`;
}

/** What every parsed object keeps of its metadata: who it is, its version, its annotations (the keep-mark). */
export type ObjectIdentity = Readonly<{
  uid: string;
  name: string;
  namespace: string;
  resourceVersion: string;
  annotations?: Readonly<Record<string, string>> | undefined;
}>;
export const DEPLOYMENTS: ResourceRef = {
  group: 'apps',
  version: 'v1',
  plural: 'deployments',
  kind: 'Deployment',
  namespaced: true,
};

/**
 * True when a write's answer is the written object itself after the write: the same UID at a
 * resourceVersion other than the one the write was preconditioned on (decision 0007). A
 * proxy's "success" that answers the object as it was is not.
 */
export function answerShowsWrite(
  answer: KubeObject | undefined,
  uid: string,
  sentRv: string | undefined,
): boolean {
  return (
    answer !== undefined &&
    sentRv !== undefined &&
    answer.metadata.uid === uid &&
    answer.metadata.resourceVersion !== sentRv
  );
}

/** When the server last wrote a change to an object: the newest `time` of its managedFields, in ms. */
export function lastWriteMs(managedFields: unknown): number | undefined {
  if (!Array.isArray(managedFields)) return undefined;
  let newest: number | undefined;
  for (const e of managedFields) {
    const t = (e as { time?: unknown } | null)?.time;
    const ms = typeof t === 'string' ? Date.parse(t) : Number.NaN;
    if (Number.isFinite(ms) && (newest === undefined || ms > newest)) newest = ms;
  }
  return newest;
}
