/**
 * A leaked bit's own history (decision 0016). A bit seen set and unheld twice, with the
 * network written in between, is the same allocation when the network's bitmap had it set in
 * every state between the two observations: DANM hands out only a clear bit (first-fit from
 * the pool's start; a static address that is set is refused), so an address freed and handed
 * out again shows a state with the bit clear. The states come from the API server's watch
 * history, from the version the previous observation verified through (the candidate's note)
 * to this snapshot's; a history that cannot be read whole carries nothing over (0003 then:
 * the candidate starts again).
 */
import type { ObserveContext } from '../../shared/contract/index.ts';
import { KubeApiError } from '../../shared/kube/errors.ts';
import type { HistoryResult, KubeReader } from '../../shared/kube/ports.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import { danmResources, type Network, parseNetwork } from './model.ts';

/** A bit whose stored candidate asks to be carried over: its index and stored fingerprint. */
export type Ask = Readonly<{ index: number; fingerprint: string; from: string }>;

/** The fingerprint of a bit first seen unused at this snapshot. */
export function freshFingerprint(net: Network): string {
  return `${net.uid}@${net.resourceVersion}`;
}

/**
 * What the stored candidate of a bit asks: undefined when there is nothing to carry (no
 * candidate, no note, another network's fingerprint).
 */
export function askOf(
  ctx: Pick<ObserveContext<unknown, Record<string, unknown>>, 'previous'>,
  net: Network,
  key: string,
  index: number,
): Ask | undefined {
  const prev = ctx.previous?.(key);
  if (!prev?.note || !prev.fingerprint.startsWith(`${net.uid}@`)) return undefined;
  return { index, fingerprint: prev.fingerprint, from: prev.note };
}

/**
 * For each of `indices` of one pool of `net`: whether its bit was set, in the same network
 * (UID) and CIDR, in every state from resourceVersion `from` to the network's own; or why
 * the history cannot say (then nothing may be concluded from it).
 */
export async function setThroughout(
  kube: KubeReader,
  group: string,
  net: Network,
  family: 4 | 6,
  indices: readonly number[],
  from: string,
  signal?: AbortSignal,
): Promise<boolean[] | { broken: string; refused?: true }> {
  if (from === net.resourceVersion) return indices.map(() => true);
  const cidr = (family === 4 ? net.v4 : net.v6)?.cidr.text;
  // Each state is reduced as it arrives to which of the bits it has set.
  const view = (o: KubeObject): boolean[] => {
    const n = parseNetwork(o, net.type);
    const pool = family === 4 ? n.v4 : n.v6;
    const same = n.uid === net.uid && pool !== undefined && pool.cidr.text === cidr;
    return indices.map((i) => same && pool.bitmap.isSet(i));
  };
  const ref = danmResources(group)[net.type];
  const span = { from, until: net.resourceVersion };
  let h: HistoryResult<boolean[]>;
  try {
    h = await kube.history(ref, net.namespace, net.name, span, view, signal);
  } catch (err) {
    // refused (no `watch` verb), a server error: the history says nothing, the run goes on
    if (signal?.aborted) throw err;
    const broken = `its history could not be read: ${(err as Error).message}`;
    if (!(err instanceof KubeApiError) || err.status !== 403) return { broken };
    return {
      broken: `${broken} (this identity may not watch ${ref.plural}: grant it the watch verb, as the RBAC of this version does)`,
      refused: true,
    };
  }
  if ('broken' in h) return h;
  return indices.map((_, k) => h.states.every((st) => st[k]));
}

/**
 * The fingerprints carried over for the asks of one pool of `net` (index -> fingerprint):
 * those whose bit was set, in the same CIDR, in every state since the version each ask was
 * verified through. One replay per distinct version (one per network, as a rule).
 */
export async function carried(
  kube: KubeReader,
  ctx: Pick<ObserveContext<unknown, Record<string, unknown>>, 'note' | 'signal'>,
  group: string,
  net: Network,
  family: 4 | 6,
  asks: readonly Ask[],
): Promise<Map<number, string>> {
  const out = new Map<number, string>();
  const byFrom = new Map<string, Ask[]>();
  for (const a of asks) byFrom.set(a.from, [...(byFrom.get(a.from) ?? []), a]);
  for (const [from, these] of byFrom) {
    const set = await setThroughout(
      kube,
      group,
      net,
      family,
      these.map((a) => a.index),
      from,
      ctx.signal,
    );
    if ('broken' in set) {
      // Refused is a setting to fix (a warning); a history the server no longer keeps is not.
      ctx.note(
        'bits.history',
        {
          kind: net.type,
          name: net.namespace ? `${net.namespace}/${net.name}` : net.name,
          from,
          until: net.resourceVersion,
          reason: `${set.broken}: its leaked bits start their grace again`,
        },
        set.refused ? 'warn' : 'info',
      );
      continue;
    }
    these.forEach((a, k) => {
      if (set[k]) out.set(a.index, a.fingerprint);
    });
  }
  return out;
}
