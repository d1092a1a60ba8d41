/**
 * The sandbox's rule scene: the cilium-endpoints rule pack (the README's example of a
 * rule), against a StatefulSet pod re-created under the same name and a pod gone with
 * its node.
 */
import { MINUTE as MIN } from '../../contract/index.ts';
import { PODS } from '../../kube/resources.ts';
import { packageRoot } from '../../paths.ts';
import { ruleFunction } from '../../rules/function.ts';
import { loadRuleFile } from '../../rules/rule.ts';
import type { RunResult } from '../../runtime/run.ts';
import { type Scene, startScene } from '../pass.ts';
import { adoptEndpoint, CILIUM, createEndpoint } from '../scenarios/cilium.ts';
import { createPodObject } from '../scenarios/danm.ts';

export const RULE_FILE = 'functions/rules/cilium-endpoints/rule.yaml';

export async function ruleScene(
  s: Scene,
): Promise<{ runs: RunResult[]; problems: string[]; reclaimed: number }> {
  const { kube, advance, say } = s;
  const ns = 'shop';
  const rule = loadRuleFile(`${packageRoot()}/${RULE_FILE}`)[0]!;
  const { runs, problems, pass } = startScene(ruleFunction(rule), s);
  await kube.create(
    { group: '', version: 'v1', plural: 'namespaces', kind: 'Namespace', namespaced: false },
    {
      metadata: { name: ns },
    },
  );
  say('');
  say(
    `a rule in CEL (${RULE_FILE}, README "Write your own rule"): CiliumEndpoints whose Pod, by UID, is gone.`,
  );
  const pods: Record<string, Awaited<ReturnType<typeof createPodObject>>> = {};
  for (const name of ['api-0', 'web-0', 'cache-0']) {
    pods[name] = await createPodObject(kube, ns, name);
    await createEndpoint(kube, pods[name]!, 1000 + Object.keys(pods).length);
  }
  say('Pods shop/api-0, web-0 and cache-0, each with its CiliumEndpoint. A node is lost: cache-0 is gone;');
  say('web-0 is re-created under the same name (a new UID), and its endpoint still names the old Pod.');
  const del = (name: string) =>
    kube.deleteWithPreconditions(PODS, ns, name, {
      uid: pods[name]!.metadata.uid,
      resourceVersion: pods[name]!.metadata.resourceVersion,
    });
  await del('cache-0');
  await del('web-0');
  const fresh = await createPodObject(kube, ns, 'web-0');
  await pass('rule pass 1 (apply): both endpoints are first observations; nothing is deleted');
  say('');
  say(
    "The Cilium agent adopts web-0's endpoint for the new Pod (its owner reference now names the new UID).",
  );
  await adoptEndpoint(kube, (await kube.get(CILIUM.endpoints, ns, 'web-0'))!, fresh);
  advance(11 * MIN);
  const last = await pass(
    'rule pass 2 (apply): web-0 is in use again (rescued); cache-0, unused twice, is deleted',
  );
  const left = (await kube.listAll(CILIUM.endpoints, { namespace: ns })).items
    .map((e) => e.metadata.name)
    .sort();
  if (JSON.stringify(left) !== JSON.stringify(['api-0', 'web-0']))
    problems.push(`CiliumEndpoints left: ${left.join(',')}`);
  if (last.deleted.length !== 1) problems.push(`the rule reclaimed ${last.deleted.length}, expected 1`);
  return { runs, problems, reclaimed: last.deleted.length };
}
