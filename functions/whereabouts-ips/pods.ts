/** What a pod says of the addresses it holds: its network-status, read as whereabouts-ips judges it. */
import type { KubeReader } from '../../shared/kube/ports.ts';
import { type KubeObject, PODS } from '../../shared/kube/resources.ts';
import { networkStatusIps } from './model.ts';

/**
 * What a pod says of its addresses: those its network-status lists (an array: most pods
 * have one), null when it has no network-status yet (its allocation came first: the
 * annotation lags), or why it cannot be read.
 */
export type PodView = readonly string[] | null | string;

export function podView(o: KubeObject): PodView {
  const ips = networkStatusIps(o.metadata.annotations);
  return ips === undefined ? null : typeof ips === 'string' ? ips : [...ips];
}

/** A pod's podref, `namespace/name`, as allocations name it. */
const podrefOf = (o: KubeObject): string => `${o.metadata.namespace}/${o.metadata.name}`;

/**
 * A pod list taken into one map as its pages arrive (`view`, then `pods`): nothing else of
 * a pod is kept. A list restarted after a 410 hands some pods twice, and the pods of its
 * abandoned pages: more in use, never less.
 */
export function podMap(): { view: (o: KubeObject) => 1; pods: ReadonlyMap<string, PodView> } {
  const pods = new Map<string, PodView>();
  return {
    view: (o) => {
      pods.set(podrefOf(o), podView(o));
      return 1;
    },
    pods,
  };
}

/** Whether the pod named by podref uses ip: 'used', 'unused' or a reason it cannot be decided. */
export function judge(
  pods: ReadonlyMap<string, PodView>,
  podref: string,
  ip: string,
): 'used' | 'unused' | { indeterminate: string } {
  const pod = pods.get(podref);
  if (pod === undefined) return 'unused';
  if (pod === null) return 'used'; // allocation before evidence: the annotation lags
  if (typeof pod === 'string') return { indeterminate: `pod ${podref}: ${pod}` };
  return pod.includes(ip) ? 'used' : 'unused';
}

/** Why the pod named by podref, read now, still holds ip (undefined: it does not). */
export async function podStillUses(kube: KubeReader, podref: string, ip: string, signal: AbortSignal) {
  const [ns, name] = podref.split('/') as [string, string];
  const pod = await kube.get(PODS, ns, name, signal);
  if (!pod) return undefined;
  const j = judge(new Map([[podref, podView(pod)]]), podref, ip);
  if (j === 'unused') return undefined;
  return j === 'used' ? `pod ${podref} uses ${ip}` : j.indeterminate;
}
