/**
 * The laws at the ports. The act phase hands a function its writer through this guard, and
 * no write reaches a server unless
 *  1. it names an object that a target of this run declared its removal touches
 *     (`KindSpec.touches`),
 *  2. the tombstone of such a target is durable (law: the tombstone before the deletion), and
 *  3. it carries its server-side precondition (a DELETE's {uid, resourceVersion}, a PUT's
 *     resourceVersion, a JSON patch's leading test of /metadata/resourceVersion or a test of
 *     each path it changes, Neutron's If-Match), unless that target declared why it cannot (Octavia offers none; the
 *     operator accepted unconditional deletes).
 * A write refused is never sent: the function sees a LawRefusal, its target fails, and the
 * run says so (`law.refused`). Whatever a kind does, built in, a Kubernetes rule or a cloud
 * rule, single or batched, it cannot delete around the runtime: the guard does not trust the
 * kind's own sequence, it checks each write as it is made.
 * The guard knows the writer ports by their methods: the Kubernetes writer, Neutron and
 * Octavia, alone or as the `kube`, `neutron` and `octavia` of a composite writer.
 */
import { allows, type PolicyRule } from '../contract/access.ts';
import { kubeObject, openStackObject, type Touch } from '../contract/touch.ts';
import { TwopassError } from '../errors.ts';
import type { JsonPatchOp, Preconditions } from '../kube/ports.ts';
import type { KubeObject, ResourceRef } from '../kube/resources.ts';

/** A write the guard did not let through, and why. */
export class LawRefusal extends TwopassError {
  override name = 'LawRefusal';
  readonly retryable = false;
}

type Claim = Readonly<{ key: string; unconditional?: string | undefined }>;

/** One write let through: what it wrote, under which target's tombstone, with or without a precondition. */
export type GuardedWrite = Readonly<{ object: string; call: string; key: string; precondition: boolean }>;

export class LawGuard {
  private readonly exact = new Map<string, Claim[]>();
  private readonly wild = new Map<string, Claim[]>();
  private readonly durable = new Set<string>();
  /** Writes refused, each with its reason (the run fails for them). */
  readonly refusals: string[] = [];
  /** Writes let through (what the tests read to prove each was tombstoned and preconditioned). */
  readonly writes: GuardedWrite[] = [];

  /**
   * `declared`: per target key, what its removal touches. `access`: the function's declared
   * cluster rules (`FunctionSpec.access`); when given, a Kubernetes write they do not allow
   * is refused (RBAC would refuse it in a cluster: the tests find it first).
   */
  private readonly access: readonly PolicyRule[] | undefined;

  constructor(declared: Iterable<readonly [string, readonly Touch[]]>, access?: readonly PolicyRule[]) {
    this.access = access;
    for (const [key, touches] of declared)
      for (const t of touches) {
        const wild = t.object.endsWith('/*');
        const map = wild ? this.wild : this.exact;
        const at = wild ? t.object.slice(0, -1) : t.object;
        const list = map.get(at) ?? [];
        list.push({ key, unconditional: t.unconditional });
        map.set(at, list);
      }
  }

  /** The tombstones of these targets are durable: their objects may now be written. */
  markDurable(keys: Iterable<string>): void {
    for (const k of keys) this.durable.add(k);
  }

  isDurable(key: string): boolean {
    return this.durable.has(key);
  }

  /** Lets one write through, or throws LawRefusal (nothing sent). */
  check(object: string, call: string, precondition: boolean): void {
    const slash = object.lastIndexOf('/');
    const claims = [...(this.exact.get(object) ?? []), ...(this.wild.get(object.slice(0, slash + 1)) ?? [])];
    const refuse = (why: string): never => {
      const reason = `${call} of ${object} refused, not sent: ${why}`;
      this.refusals.push(reason);
      throw new LawRefusal(reason);
    };
    if (claims.length === 0) refuse('no target of this run declares that its removal touches it');
    const kube = /^kube:([^/]*)\/([^/]+)\//.exec(object);
    if (kube && this.access && !allows(this.access, kube[1]!, kube[2]!, call))
      refuse(`its function's access declares no ${call} of ${kube[2]} (${kube[1] || 'core'})`);
    const durable = claims.filter((c) => this.durable.has(c.key));
    if (durable.length === 0)
      refuse(`the tombstone of ${claims.map((c) => c.key).join(', ')} is not durable yet`);
    const free = durable.find((c) => c.unconditional !== undefined);
    if (!precondition && !free) refuse('it carries no server-side precondition');
    this.writes.push({ object, call, key: (free ?? durable[0]!).key, precondition });
  }

  /** `writer` with each write it can make checked first (ports it does not know pass as they are). */
  wrap<W>(writer: W): W {
    return wrapPort(writer, this) as W;
  }
}

const hasResourceVersion = (o: unknown): boolean =>
  typeof (o as { metadata?: { resourceVersion?: unknown } } | undefined)?.metadata?.resourceVersion ===
    'string' && (o as KubeObject).metadata.resourceVersion !== '';

/** The writes of each known port: the object each names, and whether it carries its precondition. */
type Rule = (args: unknown[]) => { object: string; precondition: boolean };
/** A PUT of a whole object: named by its metadata, conditional on its resourceVersion. */
const wholeObject: Rule = ([ref, obj]) => ({
  object: kubeObject(
    ref as ResourceRef,
    (obj as KubeObject).metadata?.namespace,
    (obj as KubeObject).metadata?.name,
  ),
  precondition: hasResourceVersion(obj),
});
const KUBE: Record<string, Rule> = {
  deleteWithPreconditions: ([ref, ns, name, pre]) => ({
    object: kubeObject(ref as ResourceRef, ns as string | undefined, name as string),
    precondition: Boolean((pre as Preconditions | undefined)?.uid && (pre as Preconditions).resourceVersion),
  }),
  delete: ([ref, ns, name]) => ({
    object: kubeObject(ref as ResourceRef, ns as string | undefined, name as string),
    precondition: false,
  }),
  replace: wholeObject,
  replaceStatus: wholeObject,
  jsonPatch: ([ref, ns, name, ops]) => ({
    object: kubeObject(ref as ResourceRef, ns as string | undefined, name as string),
    precondition: patchTested((ops as readonly JsonPatchOp[] | undefined) ?? []),
  }),
  mergePatch: ([ref, ns, name, patch]) => ({
    object: kubeObject(ref as ResourceRef, ns as string | undefined, name as string),
    precondition: hasResourceVersion(patch),
  }),
};
/**
 * A JSON patch carries its precondition when it first tests the object's resourceVersion, or
 * when every path it changes was tested just before, with the value it had when read.
 */
export function patchTested(ops: readonly JsonPatchOp[]): boolean {
  const first = ops[0];
  if (
    first?.op === 'test' &&
    first.path === '/metadata/resourceVersion' &&
    typeof first.value === 'string' &&
    first.value !== ''
  )
    return true;
  const changes = ops.filter((o) => o.op !== 'test');
  return (
    changes.length > 0 &&
    changes.every((o) => {
      const before = ops[ops.indexOf(o) - 1];
      return before?.op === 'test' && before.path === o.path && before.value !== undefined;
    })
  );
}
const revision = (r: unknown) => typeof r === 'number' && Number.isSafeInteger(r) && r >= 0;
const NEUTRON: Record<string, Rule> = {
  deletePort: ([id, rev]) => ({
    object: openStackObject('neutron', 'ports', id as string),
    precondition: revision(rev),
  }),
  deleteFloatingIp: ([id, rev]) => ({
    object: openStackObject('neutron', 'floatingips', id as string),
    precondition: revision(rev),
  }),
  deleteSecurityGroup: ([id, rev]) => ({
    object: openStackObject('neutron', 'security-groups', id as string),
    precondition: revision(rev),
  }),
  setPortSecurityGroups: ([id, , rev]) => ({
    object: openStackObject('neutron', 'ports', id as string),
    precondition: revision(rev),
  }),
};
const OCTAVIA: Record<string, Rule> = {
  deleteLoadBalancer: ([id]) => ({
    object: openStackObject('octavia', 'loadbalancers', id as string),
    precondition: false,
  }),
};

function portRules(o: object): Record<string, Rule> | undefined {
  const has = (m: string) => typeof (o as Record<string, unknown>)[m] === 'function';
  if (has('deleteWithPreconditions')) return KUBE;
  if (has('deletePort')) return NEUTRON;
  if (has('deleteLoadBalancer')) return OCTAVIA;
  return undefined;
}

function wrapPort(port: unknown, guard: LawGuard): unknown {
  if (port === null || typeof port !== 'object') return port;
  const rules = portRules(port);
  if (!rules) {
    // a composite writer: its Kubernetes, Neutron and Octavia ports, each guarded
    const parts = ['kube', 'neutron', 'octavia'].filter((k) => k in port);
    if (parts.length === 0) return port;
    const out: Record<string, unknown> = { ...(port as Record<string, unknown>) };
    for (const k of parts) out[k] = wrapPort((port as Record<string, unknown>)[k], guard);
    return out;
  }
  return new Proxy(port, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      const rule = typeof prop === 'string' && Object.hasOwn(rules, prop) ? rules[prop] : undefined;
      if (!rule) return v.bind(target);
      return (...args: unknown[]) => {
        try {
          const { object, precondition } = rule(args);
          guard.check(object, prop as string, precondition);
        } catch (err) {
          // every guarded write is async: a refusal is its rejection, as any failed write
          return Promise.reject(err);
        }
        return v.apply(target, args);
      };
    },
  });
}
