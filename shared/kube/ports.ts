/**
 * The read and write ports functions are written against (read/write split):
 * observing gets a KubeReader, only removal gets a KubeWriter.
 */
import type { HistoryResult } from './history.ts';
import type { KubeObject, ResourceRef } from './resources.ts';

export type { HistoryResult } from './history.ts';

export type ListOptions<T = KubeObject> = Readonly<{
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Ask for PartialObjectMetadataList: items carry only metadata. */
  metadataOnly?: boolean;
  /**
   * Keep of `metadata.managedFields` only the time of the object's last write that changed it
   * (the newest entry's `time`, as `[{ time }]`); otherwise managedFields are dropped.
   */
  lastWriteTime?: boolean;
  pageSize?: number;
  signal?: AbortSignal;
  /**
   * What to keep of each item, applied as each page arrives (the raw page is then
   * dropped): memory holds the views and one page, not every raw object. A list that
   * fails still fails whole (law 1).
   */
  view?: (item: KubeObject) => T;
}>;

export type ListResult<T = KubeObject> = Readonly<{
  items: T[];
  resourceVersion: string;
  pages: number;
  /** How often the list restarted after an expired continue token. */
  restarts: number;
}>;

/** An object to create: the server fills in uid, resourceVersion and the rest. */
export type NewObject = { metadata: Record<string, unknown>; [k: string]: unknown };

export type Preconditions = Readonly<{ uid: string; resourceVersion: string }>;

/**
 * What a DELETE came to (404 'gone', 409 'conflict'). With preconditions, `deleted` means the
 * answer itself shows the object of that UID gone (a Status of Success naming the UID, or the
 * object as it was, with no deletion pending); `accepted` is a success whose answer shows no
 * such thing (a proxy's bare Success, an object whose deletion waits on finalizers or a
 * grace period): read it back (decision 0007). A plain DELETE knows no UID: any success is
 * `deleted`.
 */
export type DeleteOutcome = 'deleted' | 'accepted' | 'gone' | 'conflict';

export type JsonPatchOp = Readonly<{
  op: 'test' | 'add' | 'remove' | 'replace';
  path: string;
  value?: unknown;
}>;

export interface KubeReader {
  /** Every item of a collection, all pages, one consistent resourceVersion; throws ListIncompleteError otherwise. */
  listAll<T = KubeObject>(ref: ResourceRef, options?: ListOptions<T>): Promise<ListResult<T>>;
  /** One object, or undefined on 404. */
  get(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    signal?: AbortSignal,
  ): Promise<KubeObject | undefined>;
  /** Whether the server serves this group/version/plural (discovery). */
  serves(group: string, version: string, plural: string, signal?: AbortSignal): Promise<boolean>;
  /**
   * The states one object went through after resourceVersion `from`, up to and including the
   * one at `until` (both versions of that object the caller saw), each through `view`: a
   * watch replayed from the server's history. `broken` when that cannot show every state.
   */
  history<T>(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    span: Readonly<{ from: string; until: string }>,
    view: (o: KubeObject) => T,
    signal?: AbortSignal,
  ): Promise<HistoryResult<T>>;
}

/**
 * What a function may write: every delete carries preconditions {uid, resourceVersion}, so
 * an object re-created or changed since it was judged is never deleted (law 6). The plain
 * DELETE is not here: only the tool's own objects (state shards) and the sandbox use it.
 */
export interface KubeWriter {
  create(ref: ResourceRef, obj: NewObject, signal?: AbortSignal): Promise<KubeObject>;
  /** PUT with metadata.resourceVersion: a stale version throws ConflictError. */
  replace(ref: ResourceRef, obj: KubeObject, signal?: AbortSignal): Promise<KubeObject>;
  jsonPatch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    ops: readonly JsonPatchOp[],
    signal?: AbortSignal,
  ): Promise<KubeObject>;
  mergePatch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    patch: unknown,
    signal?: AbortSignal,
  ): Promise<KubeObject>;
  /** DELETE with preconditions {uid, resourceVersion}: 409 is 'conflict', 404 is 'gone' (see DeleteOutcome). */
  deleteWithPreconditions(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    pre: Preconditions,
    signal?: AbortSignal,
  ): Promise<DeleteOutcome>;
}

/** Writes that are not a function's: the tool's own objects (state shards), and the sandbox's seeding. */
export interface KubeOwnWriter {
  /** Plain DELETE, optionally with a grace period (0: force, as an operator does after a node is lost). */
  delete(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    signal?: AbortSignal,
    options?: Readonly<{ gracePeriodSeconds?: number }>,
  ): Promise<DeleteOutcome>;
  /** PUT of the status subresource (a controller's write, for the sandbox and tests). */
  replaceStatus(ref: ResourceRef, obj: KubeObject, signal?: AbortSignal): Promise<KubeObject>;
}

/** A function's writer: it reads back what it wrote, and every delete it can make is preconditioned. */
export type KubeReadWriter = KubeReader & KubeWriter;

export type KubeClient = KubeReader & KubeWriter & KubeOwnWriter;
