/**
 * The sandbox's rule scene: the cilium-endpoints rule pack (the README's example of a
 * rule), against a StatefulSet pod re-created under the same name and a pod gone with
 * its node.
 */
import type { Config } from '../../config.ts';
import { MINUTE as MIN } from '../../contract/index.ts';
import type { KubeClient } from '../../kube/ports.ts';
import { PODS } from '../../kube/resources.ts';
import type { Logger } from '../../log/logger.ts';
import { packageRoot } from '../../paths.ts';
import { ruleFunction } from '../../rules/function.ts';
import { loadRuleFile } from '../../rules/rule.ts';
import type { RunResult } from '../../runtime/run.ts';
import { instantTime } from '../../time.ts';
import { passes } from '../pass.ts';
import { adoptEndpoint, CILIUM, createEndpoint } from '../scenarios/cilium.ts';
import { createPodObject } from '../scenarios/danm.ts';

export const RULE_FILE = 'functions/rules/cilium-endpoints/rule.yaml';

export async function ruleScene(
  kube: KubeClient,
  cfg: Config,
  clock: () => number,
  advance: (ms: number) => void,
  log: Logger,
  server: string,
  say: (s: string) => void,
): Promise<{ runs: RunResult[]; problems: string[]; reclaimed: number }> {
  const runs: RunResult[] = [];
  const problems: string[] = [];
  const ns = 'shop';
  const rule = loadRuleFile(`${packageRoot()}/${RULE_FILE}`)[0]!;
  const pass = passes(
    ruleFunction(rule),
    cfg,
    { time: instantTime(clock), log, kubeOptions: { server } },
    say,
    runs,
  );
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
