/**
 * The DanmBit kind: an address bit set in a DANM network's bitmap that no DanmEp holds.
 * The leaked bits of one network are cleared in the network's batch (`batch.ts`), with its
 * DanmEps: one write with the network's resourceVersion, on the run's shared fresh evidence.
 */
import { type KindSpec, kubeObject } from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { networkBatch } from './batch.ts';
import { type BitData, bitData, type Settings } from './data.ts';
import { networkEvent } from './event.ts';
import { danmResources, networkId } from './model.ts';
import { restoreBit } from './restore.ts';

export const bitKind: KindSpec<BitData, KubeReader, KubeReadWriter, Settings> = {
  data: bitData,
  unused:
    "the address is set in the network's bitmap, no DanmEp holds it, and no pod is being set up on the network",
  removal:
    "clear the bit in the network's allocation bitmap (one update of the network, on the resourceVersion read)",
  touches: (d) => [{ object: kubeObject(danmResources(d.group)[d.networkType], d.namespace, d.name) }],
  event: networkEvent,
  batch: networkBatch,
  restore: restoreBit,
  place: (d) => networkId(d.networkType, d.namespace, d.name),
};

export type { BitData } from './data.ts';
