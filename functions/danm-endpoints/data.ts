/**
 * What danm-endpoints' kinds are made of: its settings, the data of a DanmEp and of a leaked
 * bit, and their tombstones' schemas. A leaf: the kinds, their batch and their restores read it.
 */
import { z } from 'zod';
import { describeValue, namespacesSetting, pageSizeSetting } from '../../shared/contract/index.ts';
import { kubeObjectPayload } from '../../shared/contract/tombstone.ts';
import { GROUPS, type NetworkType } from './model.ts';

/** The settings of danm-endpoints (`functions.danm-endpoints.settings`). */
export const danmEndpointsSettings = z
  .object({
    namespaces: namespacesSetting
      .optional()
      .describe(
        'only DanmEps and networks of these namespaces are targets; ClusterNetworks always are (default: all)',
      ),
    group: z
      .enum(GROUPS, { error: (i) => `expected one of ${GROUPS.join(', ')}, got ${describeValue(i.input)}` })
      .optional()
      .describe('the DANM API group (default: detected)'),
    pageSize: pageSizeSetting.default(500).describe('items per list page'),
    serverSkewSeconds: z
      .number({ error: (i) => `expected a number of seconds, got ${describeValue(i.input)}` })
      .int()
      .min(1)
      .max(3600)
      .default(60)
      .describe(
        "how far apart the API servers' clocks may be: a pod counts as created after its network's last write (so its CNI ADD set no bit there) only when later by more than this",
      ),
  })
  .strict();

export type Settings = z.output<typeof danmEndpointsSettings>;

export const networkType = z.enum(['DanmNet', 'TenantNetwork', 'ClusterNetwork']);

export const epData = z.object({
  group: z.string().min(1),
  namespace: z.string().min(1),
  name: z.string().min(1),
  uid: z.string().min(1),
  rv: z.string().min(1),
  pod: z.string().min(1),
  podUID: z.string().min(1),
  networkType,
  network: z.string().min(1),
  v4: z.string().optional(),
  v6: z.string().optional(),
});
export type EpData = z.output<typeof epData>;

export const bitData = z.object({
  group: z.string().min(1),
  networkType,
  namespace: z.string().min(1).optional(),
  name: z.string().min(1),
  uid: z.string().min(1),
  rv: z.string().min(1),
  family: z.union([z.literal(4), z.literal(6)]),
  index: z.number().int().min(0),
  address: z.string().min(1),
  /** The pool's bitmap as observed (base64), to tell bits cleared since from bits newly set. */
  alloc: z.string(),
});
export type BitData = z.output<typeof bitData>;

/** The target data of one network's batch: its DanmEps and its leaked bits. */
export type NetData = EpData | BitData;

/** The network a tombstone's DanmEp or bit was in. */
const where = z.object({
  group: z.string().min(1),
  type: z.enum(['DanmNet', 'TenantNetwork', 'ClusterNetwork'] satisfies NetworkType[]),
  namespace: z.string().optional(),
  name: z.string().min(1),
  uid: z.string().optional(),
});
export type Where = z.output<typeof where>;

/** A DanmEp's tombstone: the DanmEp as it was, and its network and addresses. */
export const ENDPOINT_TOMBSTONE = {
  object: kubeObjectPayload,
  restore: where.extend({ v4: z.string().optional(), v6: z.string().optional() }),
};

/** A leaked bit's tombstone: the bit, and its network (by UID). */
export const BIT_TOMBSTONE = {
  object: z
    .object({
      family: z.union([z.literal(4), z.literal(6)]),
      index: z.number().int().nonnegative(),
      address: z.string(),
    })
    .passthrough(),
  /** `network`: its id as the diff log prints it. */
  restore: where.extend({ network: z.string().optional() }),
};
