/**
 * A cloud rule's settings: the project, the cluster's name as its resources carry it, and the
 * rule's acknowledgements, each refused until given.
 */
import { z } from 'zod';
import { nonEmpty, pageSizeSetting } from '../contract/index.ts';
import { CLUSTER, type CloudRule } from './cloud-rule.ts';

/**
 * cloud-provider-openstack's default `--cluster-name`: every cluster whose controller never
 * set it writes this same name, so it tells no cluster from another in a shared project.
 */
export const OCCM_DEFAULT_CLUSTER = 'kubernetes';

export const cloudRuleSettings = z
  .object({
    projectId: nonEmpty('a project ID').describe('the OpenStack project whose resources the rule judges'),
    cluster: nonEmpty('the cluster name').describe(
      `the cluster's name as the resources carry it (\`${CLUSTER}\` in the rule's ownership)`,
    ),
    cloud: nonEmpty('a cloud name').optional().describe('the clouds.yaml entry (default: $OS_CLOUD)'),
    pageSize: pageSizeSetting.default(500).describe('items per list page'),
    clusterNameIsUnique: z
      .boolean()
      .default(false)
      .describe(
        `set to true only when no other cluster in the project uses the cluster name \`${OCCM_DEFAULT_CLUSTER}\` (cloud-provider-openstack's default --cluster-name)`,
      ),
  })
  .strict();
export type Settings = z.output<typeof cloudRuleSettings>;

/**
 * A rule's settings: the common ones and its acknowledgements (each `false` until the
 * operator sets it). A run refuses (exit 2) while one is missing, or while the cluster
 * name is cloud-provider-openstack's default and the operator has not said it is theirs alone.
 */
export function cloudSettingsOf(rule: Pick<CloudRule, 'acknowledgements'>) {
  const acks = Object.fromEntries(
    rule.acknowledgements.map((a) => [a.setting, z.boolean().default(false).describe(a.why)]),
  );
  // typed as the common settings: an acknowledgement is read by name, only here
  return cloudRuleSettings.extend(acks as Record<never, never>).superRefine((s, ctx) => {
    if (s.cluster === OCCM_DEFAULT_CLUSTER && !s.clusterNameIsUnique)
      ctx.addIssue({
        code: 'custom',
        path: ['cluster'],
        message: `\`${OCCM_DEFAULT_CLUSTER}\` is cloud-provider-openstack's default --cluster-name, which every cluster that never set it shares: another cluster's load balancers, floating IPs and security groups in project ${s.projectId} would carry the same names and be judged as this cluster's. Give the controller a --cluster-name of this cluster's own and set it here, or, if no other cluster in the project uses \`${OCCM_DEFAULT_CLUSTER}\`, say so with \`clusterNameIsUnique: true\``,
      });
    const given = s as Record<string, unknown>;
    for (const a of rule.acknowledgements)
      if (given[a.setting] !== true)
        ctx.addIssue({
          code: 'custom',
          path: [a.setting],
          message: `this rule runs only once \`${a.setting}: true\` is set: ${a.why}`,
        });
  });
}
