/**
 * A rule's access: list, get and delete on its Kubernetes targets, list on its evidence,
 * nothing else. A cloud rule's targets are in OpenStack (its credentials are the Secret's):
 * in the cluster it only lists its evidence.
 */
import type { Access, PolicyRule } from '../contract/access.ts';
import type { CloudRule } from './cloud-rule.ts';
import type { Rule } from './rule.ts';

/** A rule of either kind: its targets in Kubernetes, or in OpenStack (`target.openstack`). */
export type AnyRule = Rule | CloudRule;
export const isCloudRule = (r: AnyRule): r is CloudRule => 'cloud' in r;

/** One entry per resource, targets first. */
export function ruleAccess(rule: AnyRule): Access {
  const out: { apiGroups: string[]; resources: string[]; verbs: string[] }[] = [];
  const at = new Map<string, (typeof out)[number]>();
  const add = (group: string, resource: string, verbs: readonly string[]) => {
    const k = `${group}/${resource}`;
    const have = at.get(k);
    if (have) {
      for (const v of verbs) if (!have.verbs.includes(v)) have.verbs.push(v);
      return;
    }
    const r = { apiGroups: [group], resources: [resource], verbs: [...verbs] };
    at.set(k, r);
    out.push(r);
  };
  const cloud = isCloudRule(rule);
  if (!cloud) add(rule.target.ref.group, rule.target.ref.plural, ['list', 'get', 'delete']);
  for (const e of rule.evidence) add(e.ref.group, e.ref.plural, ['list']);
  return { cluster: out satisfies PolicyRule[], ...(cloud ? { openstack: true } : {}) };
}
