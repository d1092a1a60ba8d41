/**
 * Tombstone payloads are typed: each kind declares what its tombstones hold, and a restore
 * parses it first. A tombstone of another shape (damaged, edited, or of another version) is
 * refused with the field that is wrong, before anything is read or written.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  BIT_TOMBSTONE,
  ENDPOINT_TOMBSTONE,
  restoreBit,
  restoreEndpoint,
} from '../../functions/danm-endpoints/restore.ts';
import { LBAAS_TOMBSTONE, portKind } from '../../functions/lbaas-ports/remove.ts';
import { ALLOCATION_TOMBSTONE, allocationKind } from '../../functions/whereabouts-ips/kinds.ts';
import { reservationKind } from '../../functions/whereabouts-ips/reservation.ts';
import { recreateAsWas } from '../../shared/contract/kube.ts';
import { readPayload, type Tombstone } from '../../shared/contract/tombstone.ts';
import { PODS } from '../../shared/kube/resources.ts';

const tomb = (kind: string, object: unknown, restore?: unknown): Tombstone => ({
  key: 'k',
  kind,
  name: 'n',
  object,
  ...(restore !== undefined ? { restore } : {}),
  function: 'f',
  runId: 'r',
  snapshotId: 's',
  fingerprint: 'fp',
  reason: 'unused',
  at: 0,
});

/** A reader and writer that fail the test if a refused restore touches them. */
const untouchable = new Proxy(
  {},
  {
    get: (_t, p) => () => {
      throw new Error(`a refused restore called ${String(p)}`);
    },
  },
) as never;
const ctx = {
  apply: true,
  signal: new AbortController().signal,
  now: 0,
  settings: {},
  note: () => {},
} as never;

test('readPayload: the parsed object and facts, or the first wrong field of each', () => {
  const ok = readPayload(
    tomb(
      'DanmBit',
      { family: 4, index: 3, address: '10.0.0.3' },
      {
        group: 'danm.k8s.io',
        type: 'DanmNet',
        namespace: 'a',
        name: 'net',
      },
    ),
    BIT_TOMBSTONE,
  );
  assert.ok(ok.ok);
  if (ok.ok) assert.is(ok.object.index, 3);
  const badObject = readPayload(tomb('DanmBit', { family: 5, index: 3, address: 'x' }, {}), BIT_TOMBSTONE);
  assert.equal(badObject.ok, false);
  if (!badObject.ok) assert.match(badObject.reason, /the tombstone's DanmBit is not one: `family`/);
  const badFacts = readPayload(
    tomb('DanmBit', { family: 4, index: 3, address: '10.0.0.3' }, { type: 'DanmNet', name: 'net' }),
    BIT_TOMBSTONE,
  );
  if (!badFacts.ok) assert.match(badFacts.reason, /restore facts of the DanmBit do not parse: `group`/);
  else assert.unreachable('a tombstone without its network group');
});

test('each kind refuses a tombstone of another shape, naming the field, and touches nothing', async () => {
  const cases: [string, Promise<{ outcome: string; reason?: string }>, RegExp][] = [
    [
      'DanmEp without a name',
      restoreEndpoint(
        untouchable,
        untouchable,
        tomb('DanmEp', { metadata: {} }, { group: 'g', type: 'DanmNet', name: 'n' }),
        ctx,
      ),
      /`metadata\.name`/,
    ],
    [
      'DanmEp whose network type is unknown',
      restoreEndpoint(
        untouchable,
        untouchable,
        tomb(
          'DanmEp',
          { metadata: { name: 'ep', namespace: 'a' } },
          { group: 'g', type: 'Bridge', name: 'n' },
        ),
        ctx,
      ),
      /`type`/,
    ],
    [
      'DanmBit with a negative index',
      restoreBit(untouchable, untouchable, tomb('DanmBit', { family: 4, index: -1, address: 'a' }, {}), ctx),
      /`index`/,
    ],
    [
      'an allocation whose offset is not a number',
      allocationKind.restore!(
        untouchable,
        untouchable,
        tomb(
          'IPPoolAllocation',
          { id: 'c1', podref: 'a/p' },
          { namespace: 'a', pool: 'p', poolUid: 'u', offset: 'x1', ip: '10.0.0.1', podref: 'a/p' },
        ),
        ctx,
      ),
      /`offset`: expected a decimal offset/,
    ],
    [
      'an allocation with neither id nor podref',
      allocationKind.restore!(untouchable, untouchable, tomb('IPPoolAllocation', {}, {}), ctx),
      /neither id nor podref/,
    ],
    [
      'a reservation that is not an object',
      reservationKind.restore!(
        untouchable,
        untouchable,
        tomb('OverlappingRangeIPReservation', 'garbled'),
        ctx,
      ),
      /the tombstone holds no OverlappingRangeIPReservation to create/,
    ],
    [
      'a port without an id',
      portKind.restore!(untouchable, untouchable, tomb('Port', { port: { name: 'x' } }), ctx),
      /`port\.id`/,
    ],
    [
      'a Kubernetes object without metadata',
      recreateAsWas(untouchable, PODS, { spec: {} }, ctx as never),
      /`metadata`/,
    ],
  ];
  for (const [what, p, says] of cases) {
    const r = await p;
    assert.is(r.outcome, 'refused', what);
    assert.match(String(r.reason), says, what);
  }
});

test('what the act phase writes parses: the payload schemas accept the shapes written', () => {
  assert.ok(
    ENDPOINT_TOMBSTONE.restore.safeParse({
      group: 'danm.k8s.io',
      type: 'ClusterNetwork',
      namespace: '',
      name: 'c',
      v4: '10.0.0.1/24',
    }).success,
    'a ClusterNetwork, whose namespace is empty',
  );
  assert.ok(ALLOCATION_TOMBSTONE.object.safeParse({ id: 'c1', podref: 'a/p', ifname: 'net1' }).success);
  assert.ok(LBAAS_TOMBSTONE.object.safeParse({ port: { id: 'p1', fixed_ips: [] } }).success);
  const parsed = LBAAS_TOMBSTONE.object.parse({ port: { id: 'p1', tags: ['a'] } });
  assert.equal(parsed.port.tags, ['a'], 'what a kind does not name is kept as it was');
});

test.run();
