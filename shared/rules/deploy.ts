/**
 * What a rule needs in a cluster: its RBAC (list on targets and evidence, get and delete
 * on targets, and what every run needs), and the manifests that run it as its own CronJob
 * beside the base install, with its rule in a ConfigMap. Built as a built-in function's
 * are (shared/deploy/manifests.ts), from the rule's access (shared/rules/access.ts).
 */
import { type Deployable, functionManifests, type Manifest, rbac } from '../deploy/manifests.ts';
import { type AnyRule, ruleAccess } from './access.ts';

export { toYamlDocs } from '../deploy/manifests.ts';

const deployable = (rule: AnyRule): Deployable => ({
  name: rule.name,
  schedule: rule.defaults.schedule ?? '*/10 * * * *',
  access: ruleAccess(rule),
  ruleFile: rule.file,
});

/** The rule's ClusterRole and its binding to the rule's ServiceAccount. */
export function ruleRbac(rule: AnyRule, namespace: string): Manifest[] {
  return rbac(deployable(rule), { namespace, image: '' }).filter((m) => /^ClusterRole/.test(String(m.kind)));
}

/**
 * Every manifest that runs the rule as its own CronJob in `namespace` (beside the base
 * install). A cloud rule's pod reads clouds.yaml from the Secret `twopass-openstack` (cloud
 * `openstack`), as lbaas-ports does; its settings (projectId, cluster) and `enabled: true`
 * go in the base install's config, `functions.<rule>`.
 */
export function ruleManifests(rule: AnyRule, namespace: string, image: string): Manifest[] {
  return functionManifests(deployable(rule), { namespace, image });
}
