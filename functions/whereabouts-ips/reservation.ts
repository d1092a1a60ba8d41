/** whereabouts-ips' OverlappingRangeIPReservation kind: deleted alone, with preconditions. */
import { deleteAsObserved, type KindSpec, kubeObject, recreateAsWas } from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { type ResvData, reclaimed, resvData, type Settings } from './kinds.ts';
import { RESERVATIONS } from './model.ts';
import { podStillUses } from './pods.ts';

export const reservationKind: KindSpec<ResvData, KubeReader, KubeReadWriter, Settings> = {
  data: resvData,
  unused: 'no pod of its podref (namespace/name) exists',
  removal: 'DELETE the OverlappingRangeIPReservation (preconditions: uid, resourceVersion)',
  touches: (d) => [{ object: kubeObject(RESERVATIONS, d.namespace, d.name) }],
  async recheck(kube, { data: d }, ctx) {
    const r = await kube.get(RESERVATIONS, d.namespace, d.name, ctx.signal);
    if (!r || r.metadata.uid !== d.uid || r.metadata.resourceVersion !== d.rv)
      return { ok: false, reason: 'reservation changed or is gone' };
    const use = await podStillUses(kube, d.podref, d.ip, ctx.signal);
    return use ? { ok: false, reason: use } : { ok: true, before: r };
  },
  remove: (kube, { data: d }, ctx) => deleteAsObserved(kube, RESERVATIONS, d, 'the reservation', ctx.signal),
  restore: (_reader, kube, tomb, ctx) => recreateAsWas(kube, RESERVATIONS, tomb.object, ctx),
  async confirmGone(kube, { data: d }, ctx) {
    const r = await kube.get(RESERVATIONS, d.namespace, d.name, ctx.signal);
    return !r || r.metadata.uid !== d.uid;
  },
  event(removed) {
    const { data: d } = removed[0]!.target;
    return reclaimed(
      'OverlappingRangeIPReservation',
      d,
      `twopass reclaimed ${d.ip} of ${d.podref}: reservation ${d.namespace}/${d.name} deleted`,
    );
  },
};
