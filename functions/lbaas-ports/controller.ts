/**
 * The ch-k8s-lbaas controller as evidence (law 13). It hands a free tagged port to a new
 * Service from memory, without writing to Neutron: while it runs, every free port it loaded
 * is in use by its memory, and no read of the port can show the hand-over. So a port is
 * deleted only while the controller is provably stopped: its Deployment wants 0 replicas,
 * reports none, and no pod of it exists (Pending, Running, Terminating or of unknown phase).
 */
import { z } from 'zod';
import { nonEmpty } from '../../shared/contract/index.ts';
import type { KubeReader } from '../../shared/kube/ports.ts';
import { DEPLOYMENTS, type KubeObject, PODS } from '../../shared/kube/resources.ts';

/** The upstream quickstart's Deployment: `kube-system/ch-k8s-lbaas-controller`, pods `app=ch-k8s-lbaas-controller`. */
export const DEFAULT_CONTROLLER = {
  namespace: 'kube-system',
  deployment: 'ch-k8s-lbaas-controller',
} as const;

export const controllerSetting = z
  .union([
    z.literal('none', {
      error: () =>
        'expected `none` (the controller is decommissioned) or { namespace, deployment | selector }',
    }),
    z
      .object({
        namespace: nonEmpty('a namespace'),
        deployment: nonEmpty('a Deployment name').optional(),
        selector: nonEmpty(
          'a label selector of the Deployments, e.g. app=ch-k8s-lbaas-controller',
        ).optional(),
      })
      .strict()
      .refine((c) => (c.deployment === undefined) !== (c.selector === undefined), {
        message:
          'give exactly one of `deployment` (its name) and `selector` (a label selector of Deployments)',
      }),
  ])
  .default({ ...DEFAULT_CONTROLLER })
  .describe(
    'where the ch-k8s-lbaas controller runs: { namespace, deployment } (default kube-system/ch-k8s-lbaas-controller) or { namespace, selector }; ports are deleted only while it is scaled to 0 with no pod. `none` says it is decommissioned (never assumed from a missing Deployment)',
  );
export type ControllerSetting = z.output<typeof controllerSetting>;

/** What a check found: stopped (deletions may go), or running, and what shows it. */
export type ControllerState = Readonly<{ running: boolean; detail: string }>;

/** The controller's Deployment or pods could not be read: doubt, nothing is deleted (exit 3). */
export class ControllerUnknownError extends Error {
  override readonly name = 'ControllerUnknownError';
}

export const RUNNING_LINE =
  'the ch-k8s-lbaas controller is running and hands out free ports from memory: scale it to 0 to reclaim them';

const where = (c: Exclude<ControllerSetting, 'none'>) =>
  c.deployment !== undefined
    ? `Deployment ${c.namespace}/${c.deployment}`
    : `Deployments ${c.namespace} -l ${c.selector}`;

/** The label selector of a Deployment's pods (matchLabels and matchExpressions, as kubectl writes them). */
export function podSelectorOf(d: KubeObject): string {
  const sel = (d.spec as { selector?: unknown } | undefined)?.selector as
    | {
        matchLabels?: Record<string, string>;
        matchExpressions?: { key: string; operator: string; values?: string[] }[];
      }
    | undefined;
  const terms: string[] = [];
  for (const [k, v] of Object.entries(sel?.matchLabels ?? {})) terms.push(`${k}=${v}`);
  for (const e of sel?.matchExpressions ?? []) {
    const vals = (e.values ?? []).join(',');
    if (e.operator === 'In') terms.push(`${e.key} in (${vals})`);
    else if (e.operator === 'NotIn') terms.push(`${e.key} notin (${vals})`);
    else if (e.operator === 'Exists') terms.push(e.key);
    else if (e.operator === 'DoesNotExist') terms.push(`!${e.key}`);
    else
      throw new ControllerUnknownError(
        `Deployment ${d.metadata.name}: selector operator ${e.operator} not understood`,
      );
  }
  // An empty selector would select every pod of the namespace: not a selector twopass trusts.
  if (terms.length === 0)
    throw new ControllerUnknownError(
      `Deployment ${d.metadata.name} has no pod selector: its pods cannot be found`,
    );
  return terms.join(',');
}

/** A pod whose containers may still run: any phase but Succeeded or Failed, and every pod being deleted. */
function mayRun(p: KubeObject): boolean {
  if (p.metadata.deletionTimestamp) return true;
  const phase = (p.status as { phase?: unknown } | undefined)?.phase;
  return phase !== 'Succeeded' && phase !== 'Failed';
}

async function deploymentsOf(
  kube: KubeReader,
  c: Exclude<ControllerSetting, 'none'>,
  signal: AbortSignal,
): Promise<KubeObject[]> {
  if (c.deployment !== undefined) {
    const d = await kube.get(DEPLOYMENTS, c.namespace, c.deployment, signal);
    if (!d)
      throw new ControllerUnknownError(
        `${where(c)} not found: nothing is deleted while it is unknown whether the controller runs (if it is decommissioned, set \`controller: none\`; if it runs under another name, set \`controller.deployment\` or \`controller.selector\`)`,
      );
    return [d];
  }
  const list = await kube.listAll(DEPLOYMENTS, {
    namespace: c.namespace,
    labelSelector: c.selector!,
    signal,
  });
  if (list.items.length === 0)
    throw new ControllerUnknownError(
      `no Deployment matches ${where(c)}: nothing is deleted while it is unknown whether the controller runs (if it is decommissioned, set \`controller: none\`)`,
    );
  return list.items;
}

/**
 * Reads the controller's Deployment(s) and their pods, fresh. Throws ControllerUnknownError
 * when they cannot be read or found (never "stopped" by default).
 */
export async function controllerState(
  kube: KubeReader,
  c: ControllerSetting,
  signal: AbortSignal,
): Promise<ControllerState> {
  if (c === 'none')
    return { running: false, detail: 'decommissioned (`controller: none` in the configuration)' };
  let deployments: KubeObject[];
  try {
    deployments = await deploymentsOf(kube, c, signal);
  } catch (err) {
    if (err instanceof ControllerUnknownError) throw err;
    throw new ControllerUnknownError(`cannot read ${where(c)}: ${(err as Error).message}`, { cause: err });
  }
  for (const d of deployments) {
    const name = `Deployment ${c.namespace}/${d.metadata.name}`;
    const wants = (d.spec as { replicas?: unknown } | undefined)?.replicas;
    // An absent spec.replicas defaults to 1.
    if (wants !== 0) return { running: true, detail: `${name} wants ${wants ?? 1} replica(s)` };
    const has = (d.status as { replicas?: unknown } | undefined)?.replicas;
    if (typeof has === 'number' && has > 0)
      return { running: true, detail: `${name} still has ${has} replica(s)` };
    let pods: KubeObject[];
    try {
      pods = (await kube.listAll(PODS, { namespace: c.namespace, labelSelector: podSelectorOf(d), signal }))
        .items;
    } catch (err) {
      if (err instanceof ControllerUnknownError) throw err;
      throw new ControllerUnknownError(`cannot list the pods of ${name}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const alive = pods.filter(mayRun);
    if (alive.length > 0)
      return {
        running: true,
        detail: `${name} is scaled to 0 but its pod ${alive[0]!.metadata.name} still exists${alive[0]!.metadata.deletionTimestamp ? ' (Terminating)' : ''}`,
      };
  }
  return {
    running: false,
    detail: `${deployments.map((d) => `Deployment ${c.namespace}/${d.metadata.name}`).join(', ')} scaled to 0 with no pod`,
  };
}
