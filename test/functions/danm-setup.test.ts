/**
 * A pod being set up protects its network's unheld bits (decision 0004), except where it
 * cannot have set one: created after the network's last write (DANM sets a bit only by
 * writing the network), by more than the servers' clock skew.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Bitmap } from '../../functions/danm-endpoints/bitmap.ts';
import { BitEvidence } from '../../functions/danm-endpoints/evidence.ts';
import { parseEndpoint, parseNetwork } from '../../functions/danm-endpoints/model.ts';
import { networksBeingSetUp } from '../../functions/danm-endpoints/pods.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import { parseCidr } from '../../shared/net/ip.ts';

const NET = 'DanmNet/ns/net';
const pod = (name: string, created?: string, asks = '[{"network":"net"}]'): KubeObject => ({
  metadata: {
    name,
    namespace: 'ns',
    uid: `uid-${name}`,
    resourceVersion: '1',
    ...(created ? { creationTimestamp: created } : {}),
    annotations: { 'danm.k8s.io/interfaces': asks },
  },
});
/** DanmNet `net` in ns over `cidr`, with `set` bits of its bitmap set. */
function network(cidr: string, set: readonly number[]) {
  let bitmap = Bitmap.empty(parseCidr(cidr)!);
  for (const i of set) bitmap = bitmap.with(i, true);
  return parseNetwork(
    {
      metadata: { name: 'net', namespace: 'ns', uid: 'n-1', resourceVersion: '7' },
      spec: { NetworkID: 'net', Options: { cidr, alloc: Buffer.from(bitmap.bytes).toString('base64') } },
    },
    'DanmNet',
  );
}

/** DanmEp `name` on `net` for the pod of `podUID`, at `ip` (with its prefix). */
function endpoint(name: string, podUID: string, ip: string) {
  const p = parseEndpoint({
    metadata: { name, namespace: 'ns', uid: `ep-${name}`, resourceVersion: '3' },
    spec: { NetworkName: 'net', apiType: 'DanmNet', Pod: name, PodUID: podUID, Interface: { Address: ip } },
  });
  if (!p.ok) throw new Error(p.reason);
  return p.ep;
}
const at = (iso: string) => Date.parse(iso);
const WRITE = at('2026-12-06T08:00:00Z');

test('a pod created after the network was last written (beyond the skew) protects nothing there', () => {
  const check = networksBeingSetUp([pod('late-0', '2026-12-06T08:01:01Z')], [], undefined, 60_000);
  assert.is(check(NET, WRITE), undefined);
});

test('within the skew, at the same second, or before the write: it protects', () => {
  for (const t of ['2026-12-06T08:01:00Z', '2026-12-06T08:00:00Z', '2026-12-06T07:59:00Z']) {
    const check = networksBeingSetUp([pod('p-0', t)], [], undefined, 60_000);
    assert.match(String(check(NET, WRITE)), /pod ns\/p-0 is being set up on it/, t);
  }
});

test('a network whose last write is unknown, a pod without a readable time, or a skew that is not a number: it protects', () => {
  assert.ok(networksBeingSetUp([pod('a-0', '2026-12-06T09:00:00Z')], [], undefined, 60_000)(NET, undefined));
  assert.ok(networksBeingSetUp([pod('b-0')], [], undefined, 60_000)(NET, WRITE));
  assert.ok(networksBeingSetUp([pod('c-0', 'yesterday')], [], undefined, 60_000)(NET, WRITE));
  // a skew that is not a number is the default (60 s), never "no protection"
  assert.ok(networksBeingSetUp([pod('d-0', '2026-12-06T08:00:30Z')], [], undefined, Number.NaN)(NET, WRITE));
});

test('the earliest pod being set up decides: one old enough to have written keeps the protection', () => {
  const check = networksBeingSetUp(
    [pod('new-0', '2026-12-06T09:00:00Z'), pod('old-0', '2026-12-06T07:30:00Z')],
    [],
    undefined,
    60_000,
  );
  assert.match(String(check(NET, WRITE)), /pod ns\/old-0/);
});

test('a pod whose request cannot be read protects its namespace unless created after the write', () => {
  const late = networksBeingSetUp([pod('u-0', '2026-12-06T09:00:00Z', '{not json')], [], undefined, 60_000);
  assert.is(late(NET, WRITE), undefined);
  const early = networksBeingSetUp([pod('u-1', '2026-12-06T07:00:00Z', '{not json')], [], undefined, 60_000);
  assert.match(String(early(NET, WRITE)), /may be set up on any network it can reach/);
});

test('pods are taken in a pod at a time: until the list was read whole every unheld bit may be held; then only the pods with DanmEps are kept, by namespace', () => {
  const net = network('10.0.0.0/24', [5, 6]);
  const ep = endpoint;
  const ev = new BitEvidence(
    [ep('a', 'uid-a-0', '10.0.0.5/24')],
    new Map([[net.id, net]]),
    new Set([net.id]),
    60_000,
  );
  assert.equal(ev.verdict(net, 4, 6), {
    indeterminate: 'a pod not read yet may be being set up on it: its CNI ADD may hold this address',
  });
  for (const p of [pod('a-0', '2026-12-06T07:00:00Z'), pod('b-0', '2026-12-06T07:00:00Z', '[]')]) ev.pod(p);
  ev.podsRead(true);
  assert.is(ev.podNamespace('uid-a-0'), 'ns', 'a pod with a DanmEp is known by its UID');
  assert.is(ev.podNamespace('uid-b-0'), undefined, 'a pod without one is not kept');
  // a run's judgement drops the index by pod: asked after, it throws (never "no such pod")
  const dropped = new BitEvidence(
    [ep('a', 'uid-a-0', '10.0.0.5/24')],
    new Map([[net.id, net]]),
    new Set([net.id]),
  );
  dropped.pod(pod('a-0', '2026-12-06T07:00:00Z'));
  dropped.podsRead(false);
  assert.throws(() => dropped.podNamespace('uid-a-0'), /after its index was dropped/);
  assert.equal(ev.verdict(net, 4, 5), { used: 'held by DanmEp ns/a' });
  assert.is(ev.verdict(net, 4, 6), undefined, 'b-0 asks for its default network, which is not this one');
});

test('a bit held by two DanmEps is held by either: the holder index keeps both (one is stored alone, two as a list), and the address is kept as text of its own', () => {
  const net = network('10.100.200.0/24', [25, 26]);
  const ep = (name: string, ip: string) => endpoint(name, `uid-${name}`, ip);
  const eps = [ep('a', '10.100.200.25/24'), ep('b', '10.100.200.25/24'), ep('c', '10.100.200.26/24')];
  assert.is(eps[0]!.v4, '10.100.200.25', 'the address without its prefix');
  const ev = new BitEvidence(eps, new Map([[net.id, net]]), new Set([net.id]), 60_000);
  ev.podsRead(true);
  assert.equal(ev.verdict(net, 4, 25), { used: 'held by DanmEp ns/a' });
  assert.equal(
    ev.verdict(net, 4, 25, 'ep-a'),
    { used: 'held by DanmEp ns/b' },
    'the second holder, with the first left out',
  );
  assert.equal(ev.verdict(net, 4, 25, new Set(['ep-a', 'ep-b'])), undefined, 'both left out: free');
  assert.equal(ev.verdict(net, 4, 26), { used: 'held by DanmEp ns/c' }, 'a bit held once');
  assert.equal(ev.verdict(net, 4, 26, 'ep-c'), undefined, 'its one holder left out: free');
});

test.run();
