/**
 * The fake API server's object store: resources by group/version/plural, one
 * global resourceVersion, immutable stored objects (replaced on every write).
 */

import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { KubeObject, ResourceRef } from '../../kube/resources.ts';
import { WatchHistory } from './history.ts';
import { generateName, written } from './made.ts';

export type StoredObject = Readonly<KubeObject>;

export class FakeApiError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly details: Record<string, unknown>;
  constructor(code: number, reason: string, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.code = code;
    this.reason = reason;
    this.details = details;
  }
}

export function refKey(group: string, version: string, plural: string): string {
  return `${group}/${version}/${plural}`;
}

const BUILTIN: ResourceRef[] = [
  { group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true },
  { group: '', version: 'v1', plural: 'services', kind: 'Service', namespaced: true },
  { group: '', version: 'v1', plural: 'configmaps', kind: 'ConfigMap', namespaced: true },
  { group: '', version: 'v1', plural: 'secrets', kind: 'Secret', namespaced: true },
  { group: '', version: 'v1', plural: 'events', kind: 'Event', namespaced: true },
  { group: '', version: 'v1', plural: 'namespaces', kind: 'Namespace', namespaced: false },
  { group: '', version: 'v1', plural: 'persistentvolumes', kind: 'PersistentVolume', namespaced: false },
  { group: '', version: 'v1', plural: 'nodes', kind: 'Node', namespaced: false },
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true },
  { group: 'apps', version: 'v1', plural: 'deployments', kind: 'Deployment', namespaced: true },
  {
    group: 'apiextensions.k8s.io',
    version: 'v1',
    plural: 'customresourcedefinitions',
    kind: 'CustomResourceDefinition',
    namespaced: false,
  },
];

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

export class FakeStore {
  private rv = 1000;
  /** What a watch from a resourceVersion replays (per resource, bounded like a watch cache). */
  readonly history = new WatchHistory(this.rv);
  readonly resources = new Map<string, ResourceRef>();
  private readonly objects = new Map<string, Map<string, StoredObject>>();
  private readonly now: () => Date;

  constructor(now: () => Date = () => new Date()) {
    this.now = now;
    for (const r of BUILTIN) this.register(r);
    for (const ns of ['default', 'kube-system', 'kube-public', 'kube-node-lease']) {
      this.create(this.resources.get(refKey('', 'v1', 'namespaces'))!, undefined, {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: ns },
      });
    }
  }

  get resourceVersion(): string {
    return String(this.rv);
  }

  register(ref: ResourceRef): void {
    const k = refKey(ref.group, ref.version, ref.plural);
    this.resources.set(k, ref);
    if (!this.objects.has(k)) this.objects.set(k, new Map());
  }

  find(group: string, version: string, plural: string): ResourceRef | undefined {
    return this.resources.get(refKey(group, version, plural));
  }

  private bucket(ref: ResourceRef): Map<string, StoredObject> {
    return this.objects.get(refKey(ref.group, ref.version, ref.plural))!;
  }

  private id(ref: ResourceRef, ns: string | undefined, name: string): string {
    return ref.namespaced ? `${ns}/${name}` : name;
  }

  private nextRv(): string {
    this.rv++;
    return String(this.rv);
  }

  /** All objects of a resource, sorted by namespace/name, optionally in one namespace. */
  list(ref: ResourceRef, ns: string | undefined): StoredObject[] {
    const out: StoredObject[] = [];
    for (const [id, o] of this.bucket(ref)) {
      if (ns === undefined || !ref.namespaced || o.metadata.namespace === ns) out.push(o);
      void id;
    }
    return out.sort((a, b) => {
      const ka = `${a.metadata.namespace ?? ''}/${a.metadata.name}`;
      const kb = `${b.metadata.namespace ?? ''}/${b.metadata.name}`;
      return ka < kb ? -1 : ka > kb ? 1 : 0;
    });
  }

  get(ref: ResourceRef, ns: string | undefined, name: string): StoredObject {
    const o = this.bucket(ref).get(this.id(ref, ns, name));
    if (!o) throw notFound(ref, name);
    return o;
  }

  tryGet(ref: ResourceRef, ns: string | undefined, name: string): StoredObject | undefined {
    return this.bucket(ref).get(this.id(ref, ns, name));
  }

  create(ref: ResourceRef, ns: string | undefined, body: unknown): StoredObject {
    const obj = structuredClone(body) as KubeObject;
    if (!obj || typeof obj !== 'object' || !obj.metadata || typeof obj.metadata !== 'object') {
      throw new FakeApiError(400, 'BadRequest', 'object has no metadata');
    }
    const md = obj.metadata;
    if (ref.namespaced) {
      const target = md.namespace ?? ns;
      if (ns !== undefined && md.namespace !== undefined && md.namespace !== ns) {
        throw new FakeApiError(
          400,
          'BadRequest',
          'the namespace of the provided object does not match the namespace sent on the request',
        );
      }
      if (target === undefined) throw new FakeApiError(400, 'BadRequest', 'namespace required');
      md.namespace = target;
      if (!this.tryGet(this.resources.get(refKey('', 'v1', 'namespaces'))!, undefined, target)) {
        throw new FakeApiError(404, 'NotFound', `namespaces "${target}" not found`, {
          name: target,
          kind: 'namespaces',
        });
      }
    } else {
      delete md.namespace;
    }
    if (!md.name && md.generateName)
      md.name = generateName(md.generateName, (n) => this.bucket(ref).has(this.id(ref, md.namespace, n)));
    if (!md.name || typeof md.name !== 'string') {
      throw new FakeApiError(
        422,
        'Invalid',
        `${ref.kind} is invalid: metadata.name: Required value: name or generateName is required`,
      );
    }
    const id = this.id(ref, md.namespace, md.name);
    if (this.bucket(ref).has(id)) {
      throw new FakeApiError(
        409,
        'AlreadyExists',
        `${ref.plural}${ref.group ? `.${ref.group}` : ''} "${md.name}" already exists`,
        {
          name: md.name,
          group: ref.group,
          kind: ref.plural,
        },
      );
    }
    if (md.resourceVersion) {
      throw new FakeApiError(
        500,
        'InternalError',
        'resourceVersion should not be set on objects to be created',
      );
    }
    md.uid = randomUUID();
    md.creationTimestamp ??= this.now()
      .toISOString()
      .replace(/\.\d{3}Z$/, 'Z');
    md.managedFields = written(this.now());
    md.resourceVersion = this.nextRv();
    obj.apiVersion = ref.group === '' ? ref.version : `${ref.group}/${ref.version}`;
    obj.kind = ref.kind;
    const stored = deepFreeze(obj);
    this.bucket(ref).set(id, stored);
    this.history.record(refKey(ref.group, ref.version, ref.plural), 'ADDED', id, stored);
    if (ref.plural === 'customresourcedefinitions') this.registerCrd(stored);
    return stored;
  }

  /** PUT: an empty resourceVersion is an unconditional update, a stale one is 409. */
  update(ref: ResourceRef, ns: string | undefined, name: string, body: unknown): StoredObject {
    const current = this.get(ref, ns, name);
    const obj = structuredClone(body) as KubeObject;
    if (!obj?.metadata) throw new FakeApiError(400, 'BadRequest', 'object has no metadata');
    if (obj.metadata.name !== name)
      throw new FakeApiError(400, 'BadRequest', 'the name of the object does not match the name on the URL');
    const rv = obj.metadata.resourceVersion;
    if (rv !== undefined && rv !== '' && rv !== current.metadata.resourceVersion) throw conflict(ref, name);
    return this.put(ref, current, obj);
  }

  private put(ref: ResourceRef, current: StoredObject, obj: KubeObject): StoredObject {
    obj.metadata.uid = current.metadata.uid;
    obj.metadata.name = current.metadata.name;
    if (current.metadata.namespace !== undefined) obj.metadata.namespace = current.metadata.namespace;
    else delete obj.metadata.namespace;
    if (current.metadata.creationTimestamp !== undefined)
      obj.metadata.creationTimestamp = current.metadata.creationTimestamp;
    obj.apiVersion = current.apiVersion!;
    obj.kind = current.kind!;
    obj.metadata.resourceVersion = current.metadata.resourceVersion;
    if (current.metadata.managedFields !== undefined)
      obj.metadata.managedFields = current.metadata.managedFields;
    else delete obj.metadata.managedFields;
    // Like the real server, an update that changes nothing keeps the resourceVersion.
    if (JSON.stringify(sortKeys(obj)) === JSON.stringify(sortKeys(current))) return current;
    obj.metadata.resourceVersion = this.nextRv();
    // and one that changes something stamps its manager's entry with the time (seconds)
    obj.metadata.managedFields = written(this.now());
    const stored = deepFreeze(obj);
    const id = this.id(ref, current.metadata.namespace, current.metadata.name);
    this.bucket(ref).set(id, stored);
    this.history.record(refKey(ref.group, ref.version, ref.plural), 'MODIFIED', id, stored);
    return stored;
  }

  mergePatch(ref: ResourceRef, ns: string | undefined, name: string, patch: unknown): StoredObject {
    const current = this.get(ref, ns, name);
    const merged = applyMergePatch(structuredClone(current) as unknown, patch) as KubeObject;
    const rv = (patch as KubeObject | undefined)?.metadata?.resourceVersion;
    if (rv !== undefined && rv !== current.metadata.resourceVersion) throw conflict(ref, name);
    return this.put(ref, current, merged);
  }

  jsonPatch(ref: ResourceRef, ns: string | undefined, name: string, ops: unknown): StoredObject {
    const current = this.get(ref, ns, name);
    if (!Array.isArray(ops))
      throw new FakeApiError(400, 'BadRequest', 'json patch must be an array of operations');
    let doc = structuredClone(current) as unknown;
    for (const op of ops as { op: string; path: string; value?: unknown }[])
      doc = applyJsonPatchOp(doc, op, ref, name);
    return this.put(ref, current, doc as KubeObject);
  }

  delete(ref: ResourceRef, ns: string | undefined, name: string, options: unknown): StoredObject {
    const current = this.get(ref, ns, name);
    const pre = (options as { preconditions?: { uid?: string; resourceVersion?: string } } | undefined)
      ?.preconditions;
    if (pre?.uid !== undefined && pre.uid !== current.metadata.uid) {
      throw new FakeApiError(
        409,
        'Conflict',
        `Operation cannot be fulfilled on ${ref.plural}${ref.group ? `.${ref.group}` : ''} "${name}": Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${current.metadata.uid}`,
        { name, group: ref.group, kind: ref.plural },
      );
    }
    if (pre?.resourceVersion !== undefined && pre.resourceVersion !== current.metadata.resourceVersion) {
      throw new FakeApiError(
        409,
        'Conflict',
        `Operation cannot be fulfilled on ${ref.plural}${ref.group ? `.${ref.group}` : ''} "${name}": Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ResourceVersion in object meta: ${current.metadata.resourceVersion}`,
        { name, group: ref.group, kind: ref.plural },
      );
    }
    const grace = (options as { gracePeriodSeconds?: number } | undefined)?.gracePeriodSeconds;
    const nodeName = (current as { spec?: { nodeName?: string } }).spec?.nodeName;
    if (ref.group === '' && ref.plural === 'pods' && nodeName && grace !== 0) {
      // A scheduled pod is deleted gracefully: it stays, Terminating, until its kubelet confirms.
      if (current.metadata.deletionTimestamp) return current;
      const obj = structuredClone(current) as KubeObject;
      obj.metadata.deletionTimestamp = this.now()
        .toISOString()
        .replace(/\.\d{3}Z$/, 'Z');
      obj.metadata.deletionGracePeriodSeconds = grace ?? 30;
      return this.put(ref, current, obj);
    }
    const id = this.id(ref, current.metadata.namespace, name);
    this.bucket(ref).delete(id);
    const gone = { ...current, metadata: { ...current.metadata, resourceVersion: this.nextRv() } };
    this.history.record(refKey(ref.group, ref.version, ref.plural), 'DELETED', id, gone as StoredObject);
    return current;
  }

  /** Bulk seeding for tests and benchmarks: no HTTP, uid and resourceVersion assigned. */
  seed(ref: ResourceRef, objects: readonly unknown[]): StoredObject[] {
    return objects.map((o) => this.create(ref, (o as KubeObject).metadata?.namespace, o));
  }

  private registerCrd(crd: StoredObject): void {
    const spec = (
      crd as unknown as {
        spec?: {
          group?: string;
          names?: { plural?: string; kind?: string };
          scope?: string;
          versions?: { name: string; served?: boolean }[];
        };
      }
    ).spec;
    if (!spec?.group || !spec.names?.plural || !spec.names.kind) return;
    for (const v of spec.versions ?? []) {
      if (v.served === false) continue;
      this.register({
        group: spec.group,
        version: v.name,
        plural: spec.names.plural,
        kind: spec.names.kind,
        namespaced: spec.scope !== 'Cluster',
      });
    }
  }
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) out[k] = sortKeys((v as Record<string, unknown>)[k]);
    return out;
  }
  return v;
}

function notFound(ref: ResourceRef, name: string): FakeApiError {
  const kind = ref.group ? `${ref.plural}.${ref.group}` : ref.plural;
  return new FakeApiError(404, 'NotFound', `${kind} "${name}" not found`, {
    name,
    group: ref.group,
    kind: ref.plural,
  });
}

function conflict(ref: ResourceRef, name: string): FakeApiError {
  const kind = ref.group ? `${ref.plural}.${ref.group}` : ref.plural;
  return new FakeApiError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${kind} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    { name, group: ref.group, kind: ref.plural },
  );
}

export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    target && typeof target === 'object' && !Array.isArray(target)
      ? { ...(target as Record<string, unknown>) }
      : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else out[k] = applyMergePatch(out[k], v);
  }
  return out;
}

function unescapePointer(s: string): string {
  return s.replace(/~1/g, '/').replace(/~0/g, '~');
}

function applyJsonPatchOp(
  doc: unknown,
  op: { op: string; path: string; value?: unknown },
  ref: ResourceRef,
  name: string,
): unknown {
  if (!op || typeof op.path !== 'string')
    throw new FakeApiError(400, 'BadRequest', 'json patch operation has no path');
  const parts = op.path === '' ? [] : op.path.split('/').slice(1).map(unescapePointer);
  if (parts.length === 0) throw new FakeApiError(422, 'Invalid', 'json patch on the root is not supported');
  let parent = doc as Record<string, unknown> | unknown[];
  for (const p of parts.slice(0, -1)) {
    const next = Array.isArray(parent) ? parent[Number(p)] : (parent as Record<string, unknown>)[p];
    if (next === undefined || next === null || typeof next !== 'object') {
      throw new FakeApiError(
        422,
        'Invalid',
        `the server rejected our request due to an error in our request: doc is missing path: "${op.path}"`,
      );
    }
    parent = next as Record<string, unknown>;
  }
  const last = parts[parts.length - 1]!;
  const container = parent as Record<string, unknown>;
  switch (op.op) {
    case 'test': {
      const actual = Array.isArray(parent) ? parent[Number(last)] : container[last];
      // as the apiserver's JSON Patch does: a missing member tests equal to null (whereabouts guards
      // each allocation it adds so), objects equal member by member in any order (RFC 6902, 4.6)
      const missingIsNull = actual === undefined && (op.value === null || op.value === undefined);
      if (!missingIsNull && !isDeepStrictEqual(actual, op.value)) {
        const kind = ref.group ? `${ref.plural}.${ref.group}` : ref.plural;
        throw new FakeApiError(
          422,
          'Invalid',
          `the server rejected our request due to an error in our request: testing value ${op.path} failed on ${kind} ${name}`,
        );
      }
      return doc;
    }
    case 'remove':
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else {
        if (!(last in container))
          throw new FakeApiError(
            422,
            'Invalid',
            `the server rejected our request due to an error in our request: doc is missing path: "${op.path}"`,
          );
        delete container[last];
      }
      return doc;
    case 'add':
    case 'replace':
      if (Array.isArray(parent)) {
        if (last === '-') parent.push(op.value);
        else if (op.op === 'add') parent.splice(Number(last), 0, op.value);
        else parent[Number(last)] = op.value;
      } else {
        if (op.op === 'replace' && !(last in container)) {
          throw new FakeApiError(
            422,
            'Invalid',
            `the server rejected our request due to an error in our request: doc is missing key: "${op.path}"`,
          );
        }
        container[last] = op.value;
      }
      return doc;
    default:
      throw new FakeApiError(400, 'BadRequest', `json patch operation ${String(op.op)} is not supported`);
  }
}
