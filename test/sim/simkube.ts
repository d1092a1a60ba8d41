/**
 * SimKube: the KubeClient port over the fake server's in-memory store, with no
 * HTTP, so that the real function code runs against a simulated world. Lists
 * are consistent snapshots; a hook runs between list calls (the world moves
 * while a run observes); writes are reported to the world's invariant checker;
 * read faults can be injected.
 */
import { randomUUID } from 'node:crypto';
import { ListIncompleteError } from '../../shared/errors.ts';
import { ConflictError, KubeApiError } from '../../shared/kube/errors.ts';
import { replayed } from '../../shared/kube/history.ts';
import type * as port from '../../shared/kube/ports.ts';
import type { KubeObject, ResourceRef } from '../../shared/kube/resources.ts';
import { selector } from '../../shared/sandbox/kube/server.ts';
import { FakeApiError, FakeStore, refKey } from '../../shared/sandbox/kube/store.ts';
import { watchAnswer } from '../../shared/sandbox/kube/watch.ts';

export type WriteEvent =
  | { kind: 'delete'; ref: ResourceRef; before: KubeObject }
  | { kind: 'update'; ref: ResourceRef; before: KubeObject; after: KubeObject }
  | { kind: 'create'; ref: ResourceRef; after: KubeObject };

export class SimKube implements port.KubeClient {
  readonly store: FakeStore;
  /** Runs before every list call (and so between the lists of one observation). */
  beforeList: (ref: ResourceRef) => void = () => {};
  /** Runs before every write (and so between a batch's evidence read and its writes). */
  beforeWrite: (ref: ResourceRef) => void = () => {};
  /** Told of every write the cleaner makes. */
  onWrite: (e: WriteEvent) => void = () => {};
  /** Probability that a read fails (an API fault). */
  faultRate = 0;
  rng: () => number = Math.random;
  reads = 0;

  constructor(now: () => number) {
    this.store = new FakeStore(() => new Date(now()));
  }

  private fault(what: string): void {
    this.reads++;
    if (this.faultRate > 0 && this.rng() < this.faultRate)
      throw new KubeApiError(what, 503, 'ServiceUnavailable', 'simulated fault');
  }

  private wrap<T>(f: () => T): T {
    try {
      return f();
    } catch (err) {
      if (err instanceof FakeApiError) {
        const Cls = err.code === 409 ? ConflictError : KubeApiError;
        throw new Cls('sim', err.code, err.reason, err.message);
      }
      throw err;
    }
  }

  async listAll<T = KubeObject>(ref: ResourceRef, o: port.ListOptions<T> = {}): Promise<port.ListResult<T>> {
    this.beforeList(ref);
    try {
      this.fault(`list ${ref.plural}`);
    } catch (err) {
      throw new ListIncompleteError(`list ${ref.plural}`, (err as Error).message);
    }
    const r = this.store.find(ref.group, ref.version, ref.plural);
    if (!r) throw new ListIncompleteError(`list ${ref.plural}`, 'not served');
    const items = this.store
      .list(r, o.namespace)
      .filter(selector(o.labelSelector ?? null, o.fieldSelector ?? null)) as KubeObject[];
    const view = o.view ?? ((i: KubeObject) => i as unknown as T);
    return {
      items: (o.metadataOnly ? items.map((i) => ({ metadata: i.metadata }) as KubeObject) : items).map(view),
      resourceVersion: this.store.resourceVersion,
      pages: 1,
      restarts: 0,
    };
  }

  async get(ref: ResourceRef, ns: string | undefined, name: string): Promise<KubeObject | undefined> {
    this.fault(`get ${ref.plural}`);
    const r = this.store.find(ref.group, ref.version, ref.plural);
    return r ? (this.store.tryGet(r, ns, name) as KubeObject | undefined) : undefined;
  }

  /** The store's watch history, read as the client reads a watch's answer. */
  async history<T>(
    ref: ResourceRef,
    ns: string | undefined,
    name: string,
    span: Readonly<{ from: string; until: string }>,
    view: (o: KubeObject) => T,
  ): Promise<port.HistoryResult<T>> {
    this.fault(`history ${ref.plural}`);
    if (span.from === span.until) return { states: [] };
    const q = new URLSearchParams({
      watch: '1',
      fieldSelector: `metadata.name=${name}`,
      resourceVersion: span.from,
    });
    const answer = watchAnswer(this.store.history, refKey(ref.group, ref.version, ref.plural), ns, q);
    return replayed(answer.text, span.until, view);
  }

  async serves(group: string, version: string, plural: string): Promise<boolean> {
    return this.store.find(group, version, plural) !== undefined;
  }

  async create(ref: ResourceRef, obj: port.NewObject): Promise<KubeObject> {
    const o = structuredClone(obj) as KubeObject;
    if (ref.plural !== 'events') this.beforeWrite(ref);
    if (!o.metadata.name && o.metadata.generateName)
      o.metadata.name = `${o.metadata.generateName}${randomUUID().slice(0, 5)}`;
    const after = this.wrap(() => this.store.create(ref, o.metadata.namespace, o)) as KubeObject;
    if (ref.plural !== 'events') this.onWrite({ kind: 'create', ref, after });
    return after;
  }

  async replace(ref: ResourceRef, obj: KubeObject): Promise<KubeObject> {
    this.beforeWrite(ref);
    const before = this.store.tryGet(ref, obj.metadata.namespace, obj.metadata.name) as
      | KubeObject
      | undefined;
    const after = this.wrap(() =>
      this.store.update(ref, obj.metadata.namespace, obj.metadata.name, obj),
    ) as KubeObject;
    if (before) this.onWrite({ kind: 'update', ref, before, after });
    return after;
  }

  /** The simulator has no status subresource: a status write is a replace. */
  replaceStatus(ref: ResourceRef, obj: KubeObject): Promise<KubeObject> {
    return this.replace(ref, obj);
  }

  async jsonPatch(
    ref: ResourceRef,
    ns: string | undefined,
    name: string,
    ops: readonly port.JsonPatchOp[],
  ): Promise<KubeObject> {
    this.beforeWrite(ref);
    const before = this.store.tryGet(ref, ns, name) as KubeObject | undefined;
    const after = this.wrap(() => this.store.jsonPatch(ref, ns, name, ops)) as KubeObject;
    if (before) this.onWrite({ kind: 'update', ref, before, after });
    return after;
  }

  async mergePatch(
    ref: ResourceRef,
    ns: string | undefined,
    name: string,
    patch: unknown,
  ): Promise<KubeObject> {
    this.beforeWrite(ref);
    const before = this.store.tryGet(ref, ns, name) as KubeObject | undefined;
    const after = this.wrap(() => this.store.mergePatch(ref, ns, name, patch)) as KubeObject;
    if (before) this.onWrite({ kind: 'update', ref, before, after });
    return after;
  }

  async deleteWithPreconditions(
    ref: ResourceRef,
    ns: string | undefined,
    name: string,
    pre: port.Preconditions,
  ): Promise<port.DeleteOutcome> {
    return this.doDelete(ref, ns, name, { preconditions: pre, gracePeriodSeconds: 0 });
  }

  async delete(ref: ResourceRef, ns: string | undefined, name: string): Promise<port.DeleteOutcome> {
    return this.doDelete(ref, ns, name, { gracePeriodSeconds: 0 });
  }

  private doDelete(
    ref: ResourceRef,
    ns: string | undefined,
    name: string,
    opts: unknown,
  ): port.DeleteOutcome {
    this.beforeWrite(ref);
    const before = this.store.tryGet(ref, ns, name) as KubeObject | undefined;
    if (!before) return 'gone';
    try {
      this.store.delete(ref, ns, name, opts);
    } catch (err) {
      if (err instanceof FakeApiError && err.code === 409) return 'conflict';
      throw err;
    }
    this.onWrite({ kind: 'delete', ref, before });
    return 'deleted';
  }
}
