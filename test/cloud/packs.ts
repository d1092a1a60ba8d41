/** A run of a shipped cloud pack against a real-producer suite's cluster and project, on a clock the test moves. */
import { cloudRuleFunction } from '../../shared/rules/cloud-function.ts';
import type { CloudRule } from '../../shared/rules/cloud-rule.ts';
import { ADMIN_TOKEN, type Cluster } from '../cluster/cluster.ts';
import { runner } from '../helpers/runner.ts';

/** `rule` for `cluster` (its name as the pack's setting) in `projectId`, every acknowledgement it asks given. */
export const packRun = (
  c: { cluster: Cluster; env: Record<string, string> },
  rule: CloudRule,
  start: number,
  settings: { projectId: string; cluster: string },
) =>
  runner(
    cloudRuleFunction(rule),
    {
      server: c.cluster.server,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      tls: { rejectUnauthorized: false },
    },
    [],
    start,
    {
      enabled: true,
      maxEvidenceDropPercent: 100,
      settings: { ...settings, ...Object.fromEntries(rule.acknowledgements.map((a) => [a.setting, true])) },
    },
    c.env,
  );
