/**
 * Wrapping a KubeClient (controller-runtime's interceptor pattern): every call passes
 * through `around`, which may let it through, fail it, or record it. `crashAt` builds on it
 * the death of a process at a chosen call: that call and every later one fail before they
 * reach the server, exactly what a SIGKILL at that moment leaves behind.
 */
import type { KubeClient } from '../../shared/kube/ports.ts';
import type { ResourceRef } from '../../shared/kube/resources.ts';

export type Verb = 'list' | 'get' | 'history' | 'serves' | 'create' | 'replace' | 'patch' | 'delete';

export type Call = Readonly<{
  verb: Verb;
  /** The resource's plural (`danmeps`, `configmaps`, `leases`...). */
  resource: string;
  namespace?: string;
  name?: string;
  /**
   * A write's server-side precondition: `uid+rv` (a delete's preconditions), `rv` (a PUT or
   * merge patch with metadata.resourceVersion), `test` (a JSON patch that tests first), or
   * `none` (a write that would apply to whatever is there).
   */
  guard?: 'uid+rv' | 'rv' | 'test' | 'none';
}>;

export type Done = Call & { readonly result: unknown };

type Around = <T>(call: Call, next: () => Promise<T>) => Promise<T>;

type Meta = { metadata?: { name?: unknown; namespace?: unknown } };
const named = (obj: unknown): { namespace?: string; name?: string } => {
  const m = (obj as Meta).metadata ?? {};
  return {
    ...(typeof m.namespace === 'string' ? { namespace: m.namespace } : {}),
    ...(typeof m.name === 'string' ? { name: m.name } : {}),
  };
};
const rvGuard = (obj: unknown): 'rv' | 'none' =>
  typeof (obj as { metadata?: { resourceVersion?: unknown } }).metadata?.resourceVersion === 'string'
    ? 'rv'
    : 'none';
const at = (verb: Verb, ref: ResourceRef, namespace?: string, name?: string): Call => ({
  verb,
  resource: ref.plural,
  ...(namespace !== undefined ? { namespace } : {}),
  ...(name !== undefined ? { name } : {}),
});

export function intercept(inner: KubeClient, around: Around): KubeClient {
  return {
    listAll: (ref, o) => around(at('list', ref, o?.namespace), () => inner.listAll(ref, o)),
    get: (ref, ns, name, s) => around(at('get', ref, ns, name), () => inner.get(ref, ns, name, s)),
    history: (ref, ns, name, span, view, s) =>
      around(at('history', ref, ns, name), () => inner.history(ref, ns, name, span, view, s)),
    serves: (g, v, plural, s) =>
      around({ verb: 'serves', resource: plural }, () => inner.serves(g, v, plural, s)),
    create: (ref, obj, s) =>
      around({ verb: 'create', resource: ref.plural, ...named(obj) }, () => inner.create(ref, obj, s)),
    replace: (ref, obj, s) =>
      around({ verb: 'replace', resource: ref.plural, ...named(obj), guard: rvGuard(obj) }, () =>
        inner.replace(ref, obj, s),
      ),
    jsonPatch: (ref, ns, name, ops, s) =>
      around(
        { ...at('patch', ref, ns, name), guard: ops.some((o) => o.op === 'test') ? 'test' : 'none' },
        () => inner.jsonPatch(ref, ns, name, ops, s),
      ),
    mergePatch: (ref, ns, name, p, s) =>
      around({ ...at('patch', ref, ns, name), guard: rvGuard(p) }, () =>
        inner.mergePatch(ref, ns, name, p, s),
      ),
    deleteWithPreconditions: (ref, ns, name, pre, s) =>
      around(
        { ...at('delete', ref, ns, name), guard: pre.uid && pre.resourceVersion ? 'uid+rv' : 'none' },
        () => inner.deleteWithPreconditions(ref, ns, name, pre, s),
      ),
    delete: (ref, ns, name, s, o) =>
      around({ ...at('delete', ref, ns, name), guard: 'none' }, () => inner.delete(ref, ns, name, s, o)),
    replaceStatus: (ref, obj, s) =>
      around({ verb: 'replace', resource: `${ref.plural}/status`, ...named(obj) }, () =>
        inner.replaceStatus(ref, obj, s),
      ),
  };
}

/** Thrown by every call of a client whose process has died. */
export class ProcessGone extends Error {}

export type Crash = {
  client: KubeClient;
  /** The call the process died at, if it got there. */
  readonly diedAt: Call | undefined;
  /** Every call that completed before the death, with its result, in order. */
  readonly done: readonly Done[];
};

/** A client whose process dies at the first call for which `point` holds (given what completed before). */
export function crashAt(inner: KubeClient, point: (call: Call, done: readonly Done[]) => boolean): Crash {
  const done: Done[] = [];
  let diedAt: Call | undefined;
  const client = intercept(inner, async (call, next) => {
    if (diedAt) throw new ProcessGone(`the process died at ${describe(diedAt)}`);
    if (point(call, done)) {
      diedAt = call;
      throw new ProcessGone(`the process dies at ${describe(call)}`);
    }
    const result = await next();
    done.push({ ...call, result });
    return result;
  });
  return {
    client,
    get diedAt() {
      return diedAt;
    },
    done,
  };
}

export const describe = (c: Call): string =>
  `${c.verb} ${c.resource}${c.name ? ` ${c.namespace ? `${c.namespace}/` : ''}${c.name}` : ''}`;

/**
 * The writes of a run, as `verb resource [guard]` lines (sample-controller's checkAction):
 * `record` wraps the run's client, `check` compares what was written with what was
 * expected, failing on an unexpected write as well as on a missing one.
 */
export function writeRecorder(): {
  wrap: (kube: KubeClient) => KubeClient;
  writes: () => string[];
  check: (expected: readonly string[], what: string) => void;
} {
  const seen: string[] = [];
  const writes = new Set<Verb>(['create', 'replace', 'patch', 'delete']);
  return {
    wrap: (kube) =>
      intercept(kube, (call, next) => {
        if (writes.has(call.verb) && call.resource !== 'leases' && call.resource !== 'configmaps')
          seen.push(`${call.verb} ${call.resource}${call.guard ? ` [${call.guard}]` : ''}`);
        return next();
      }),
    writes: () => [...seen],
    check: (expected, what) => {
      const tally = (l: readonly string[]) => {
        const m = new Map<string, number>();
        for (const x of l) m.set(x, (m.get(x) ?? 0) + 1);
        return [...m].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, n]) => `${n} x ${k}`);
      };
      const got = tally(seen);
      const want = tally(expected);
      if (JSON.stringify(got) !== JSON.stringify(want))
        throw new Error(`${what}: the writes were\n  ${got.join('\n  ')}\nexpected\n  ${want.join('\n  ')}`);
    },
  };
}
