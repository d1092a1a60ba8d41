/** What `rules check` says of a cloud rule: its targets, ownership, evidence, and what guards a delete. */
import { formatDuration } from '../engine/duration.ts';
import { apiVersionOf } from '../kube/resources.ts';
import { COST_LIMIT } from './cel.ts';
import { OCCM_DEFAULT_CLUSTER } from './cloud-function.ts';
import { CLOUD_EVIDENCE, CLOUD_TARGETS, type CloudRule } from './cloud-rule.ts';
import { ruleDefaults } from './function.ts';

export function explainCloudRule(r: CloudRule) {
  const d = ruleDefaults(r);
  const ifMatch = CLOUD_TARGETS[r.collection].ifMatch;
  return {
    name: r.name,
    description: r.description,
    source: r.source,
    mode: r.reportOnly ? 'report-only' : 'delete',
    target: {
      resource: `OpenStack ${CLOUD_TARGETS[r.collection].service} ${r.collection} (${r.kind}) of functions.${r.name}.settings.projectId`,
      ...(r.tags.length ? { tags: r.tags } : {}),
    },
    owner: `${r.owner.describe}, with \${cluster} = functions.${r.name}.settings.cluster, in the project`,
    /** What the operator must set before it runs (the cluster name's own check is in every cloud rule). */
    requires: [
      `functions.${r.name}.settings.clusterNameIsUnique: true, if the cluster is named ${OCCM_DEFAULT_CLUSTER} (cloud-provider-openstack's default, shared by every cluster that never set --cluster-name)`,
      ...r.acknowledgements.map((a) => `functions.${r.name}.settings.${a.setting}: true (${a.why})`),
    ],
    evidence: r.evidence
      .map((e) => ({
        name: e.name,
        resource: `${e.ref.plural}.${apiVersionOf(e.ref)} (${e.ref.kind})`,
        key: `${e.key.source.trim()} (${e.key.type})`,
        ...(e.optional ? { optional: 'not served: holds nothing' } : {}),
      }))
      .concat(
        r.cloudEvidence.map((e) => ({
          name: e.name,
          resource: `OpenStack ${CLOUD_EVIDENCE[e.collection as keyof typeof CLOUD_EVIDENCE].service} ${e.collection} of the project${e.tags.length ? `, tags ${e.tags.join(', ')}` : ''}`,
          key: `${e.key.source.trim()} (${e.key.type})`,
        })),
      ),
    inUse: r.inUse.source.trim(),
    ...(r.indeterminate ? { indeterminate: r.indeterminate.source.trim() } : {}),
    identity: 'id',
    fingerprint: [
      'id',
      ...(CLOUD_TARGETS[r.collection].service === 'Neutron'
        ? ['revision_number']
        : ['updated_at', r.collection === 'loadbalancers' ? 'provisioning_status' : 'status']),
      ...r.fingerprint.map((f) => f.source.trim()),
    ],
    delete: !CLOUD_TARGETS[r.collection].deletes
      ? `never: ${r.collection} are only ever reported (a deleted ${r.kind}'s data cannot be had back)`
      : r.reportOnly
        ? 'never: a report-only rule is found and reported, never deleted'
        : r.release
          ? `each port still in the group (evidence.${r.release.evidence}) taken off it first, with If-Match: the port's revision_number, when ${r.release.when.source.trim()} holds for every one (else nothing is written); then DELETE with If-Match: revision_number=<observed>, after a re-check on a fresh read and fresh evidence`
          : ifMatch
            ? `DELETE with If-Match: revision_number=<observed> after a re-check on a fresh read and fresh evidence; a Neutron without revision-if-match gets no delete at all`
            : 'DELETE without a precondition (the API offers none): the re-check on a fresh read is the last guard',
    unused: r.unused,
    cost: Math.max(r.inUse.cost, r.indeterminate?.cost ?? 0),
    schedule: d.schedule,
    graceMs: d.graceMs,
  };
}

export function describeCloudRule(r: CloudRule): string {
  const x = explainCloudRule(r);
  return [
    `rule ${x.name}: ok (${x.source})`,
    `  ${x.description}`,
    `  targets:     ${x.target.resource}${x.target.tags ? `, tags ${x.target.tags.join(', ')}` : ''}`,
    `  owned by:    ${x.owner}`,
    ...x.requires.map((q) => `  requires:    ${q}`),
    ...x.evidence.map(
      (e) => `  evidence.${e.name}: ${e.resource}, keyed by ${e.key}${e.optional ? `, ${e.optional}` : ''}`,
    ),
    `  in use when: ${x.inUse}`,
    ...(x.indeterminate ? [`  undecided when (non-empty): ${x.indeterminate}`] : []),
    `  identity:    ${x.identity}; fingerprint: ${x.fingerprint.join(', ')}`,
    `  delete:      ${x.delete}`,
    `  unused:      ${x.unused}`,
    `  cost:        at most about ${x.cost.toLocaleString('en')} steps an object (limit ${COST_LIMIT.toLocaleString('en')})`,
    `  mode ${x.mode}, schedule ${x.schedule}, grace ${formatDuration(x.graceMs)}`,
    '',
  ].join('\n');
}
