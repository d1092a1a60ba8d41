/** What a pod says of the addresses it holds: its network-status, read as whereabouts-ips judges it. */
import type { KubeReader } from '../../shared/kube/ports.ts';
import { type KubeObject, PODS } from '../../shared/kube/resources.ts';
import { networkStatusIps } from './model.ts';

export type PodView = { uid: string; ips: Set<string> | undefined | string };

export function podView(o: KubeObject): PodView {
  return { uid: o.metadata.uid, ips: networkStatusIps(o.metadata.annotations) };
}

/** A pod list kept as views keyed by podref (`namespace/name`), page by page. */
export const namedPodView = (o: KubeObject): [string, PodView] => [
  `${o.metadata.namespace}/${o.metadata.name}`,
  podView(o),
];

/** Whether the pod named by podref uses ip: 'used', 'unused' or a reason it cannot be decided. */
export function judge(
  pods: ReadonlyMap<string, PodView>,
  podref: string,
  ip: string,
): 'used' | 'unused' | { indeterminate: string } {
  const pod = pods.get(podref);
  if (!pod) return 'unused';
  if (pod.ips === undefined) return 'used'; // allocation before evidence: the annotation lags
  if (typeof pod.ips === 'string') return { indeterminate: `pod ${podref}: ${pod.ips}` };
  return pod.ips.has(ip) ? 'used' : 'unused';
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
