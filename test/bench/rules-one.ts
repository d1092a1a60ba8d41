/**
 * One measurement of the rules benchmark, in its own process: the cilium-endpoints rule's
 * observation over n CiliumEndpoints and n Pods (1% of the endpoints orphaned), or its CEL
 * evaluation alone, or the floor (the same lists and a Set lookup per endpoint, written by
 * hand). Prints one JSON line.
 */
import { WorldReader } from '../../shared/cli/rules.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import { packageRoot } from '../../shared/paths.ts';
import { toCel } from '../../shared/rules/cel.ts';
import { judge, readEvidence, ruleFunction } from '../../shared/rules/function.ts';
import { loadRuleFile } from '../../shared/rules/rule.ts';
import { CILIUM } from '../../shared/sandbox/scenarios/cilium.ts';
import { parsed } from '../helpers/settings.ts';
import { arg, peakRssMiB } from './common.ts';

const n = Number(arg('n'));
const what = arg('what');
const rule = loadRuleFile(`${packageRoot()}/functions/rules/cilium-endpoints/rule.yaml`)[0]!;

function world(): WorldReader {
  const objs: KubeObject[] = [];
  for (let i = 0; i < n; i++) {
    const ns = `ns-${i % 100}`;
    const uid = `pod-${i}`;
    if (i % 100 !== 7)
      objs.push({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: `p-${i}`, namespace: ns, uid, resourceVersion: '1' },
      });
    objs.push({
      apiVersion: 'cilium.io/v2',
      kind: 'CiliumEndpoint',
      metadata: {
        name: `p-${i}`,
        namespace: ns,
        uid: `cep-${i}`,
        resourceVersion: '2',
        creationTimestamp: '2026-01-01T00:00:00Z',
        ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: `p-${i}`, uid }],
      },
    });
  }
  return new WorldReader(objs);
}

const w = world();
const signal = new AbortController().signal;
globalThis.gc?.();
const t0 = performance.now();
let result = 0;
if (what === 'rule') {
  const fn = ruleFunction(rule);
  const snap = await fn.observe(w, { now: Date.now(), signal, settings: parsed(fn), note: () => {} });
  result = snap.targets.length - snap.used.length - snap.indeterminate.length;
} else if (what === 'cel') {
  // the CEL alone: evidence indexed, objects converted, then only the evaluations are timed
  const ev = await readEvidence(rule, w, 500, signal);
  const targets = (await w.listAll(CILIUM.endpoints, { metadataOnly: true })).items.map(toCel);
  const t1 = performance.now();
  for (const o of targets) if ('unused' in judge(rule, o, ev.indexes)) result++;
  const evalMs = performance.now() - t1;
  console.log(
    JSON.stringify({ ms: evalMs, perTargetUs: (evalMs * 1000) / n, peakRssMiB: peakRssMiB(), result }),
  );
  process.exit(0);
} else {
  const eps = await w.listAll(CILIUM.endpoints, { metadataOnly: true });
  const pods = await w.listAll(
    { group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true },
    { metadataOnly: true },
  );
  const live = new Set(pods.items.map((p) => p.metadata.uid));
  for (const e of eps.items)
    if (
      !(e.metadata.ownerReferences as { kind: string; uid: string }[]).some(
        (r) => r.kind === 'Pod' && live.has(r.uid),
      )
    )
      result++;
}
console.log(JSON.stringify({ ms: performance.now() - t0, peakRssMiB: peakRssMiB(), result }));
