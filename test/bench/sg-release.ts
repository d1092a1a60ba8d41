/**
 * A lost cluster's security groups at once: N groups of gone Services, each still on the ten
 * nodes' ports (every port in every group, as OCCM leaves them), reclaimed by cpo-security-groups
 * on the fake API server and the fake Neutron. Prints the dry run and the deleting run a grace
 * later, side by side: deleted, requests by method, wall time.
 *   node test/bench/sg-release.ts [N]   (default 300; run with Node 24: `npx node ...`)
 */

import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { NODES } from '../../shared/kube/resources.ts';
import { cloudRuleFunction } from '../../shared/rules/cloud-function.ts';
import type { CloudRule } from '../../shared/rules/cloud-rule.ts';
import { loadAnyRuleFile } from '../../shared/rules/registry.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { fakeTarget } from '../helpers/kube-target.ts';
import { runner } from '../helpers/runner.ts';

const N = Number(process.argv[2] ?? 300);
const rule = loadAnyRuleFile(
  new URL('../../functions/rules/cpo-security-groups/rule.yaml', import.meta.url).pathname,
)[0] as CloudRule;
const t = await fakeTarget();
const kube = t.client();
const os = new FakeOpenStack();
await os.start();
const dir = mkdtempSync(join(tmpdir(), 'sgb-'));
writeFileSync(join(dir, 'clouds.yaml'), os.cloudsYaml('appcred', 'fake'));
const servers = Array.from({ length: 10 }, () => randomUUID());
for (const [i, s] of servers.entries())
  await kube.create(NODES, {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: `n${i}` },
    spec: { providerID: `openstack:///${s}` },
  } as never);
const groups: string[] = [];
for (let i = 0; i < N; i++)
  groups.push(
    os.addSecurityGroup({
      name: `lb-sg-${randomUUID()}-shop-s${i}`,
      description: `Security Group for shop/s${i} Service LoadBalancer in cluster prod-1`,
    }).id,
  );
// every node port carries every leaked group, as OCCM leaves them after a lost cluster's Services
for (const s of servers)
  os.addPort({ device_id: s, fixed_ips: [{ ip_address: '10.0.0.1' }], security_groups: groups } as never);
const mk = (apply: boolean) => {
  const r = runner(
    cloudRuleFunction(rule),
    t.options,
    [],
    Date.now() + MIN,
    {
      enabled: true,
      maxEvidenceDropPercent: 100,
      maxDeletions: 100000,
      maxDeletionPercent: 100,
      apply,
      settings: { projectId: 'project-a', cluster: 'prod-1' },
    } as never,
    { OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') },
  );
  return r;
};
console.log('| run | groups | deleted | requests | by method | wall | exit |\n|---|---|---|---|---|---|---|');
for (const apply of [false, true]) {
  const r = mk(apply);
  await r.run(apply);
  r.now += 31 * MIN;
  const before = os.requests.length;
  const t0 = performance.now();
  const res = await r.run(apply);
  const ms = performance.now() - t0;
  const reqs = os.requests.slice(before);
  const by = new Map<string, number>();
  for (const q of reqs) {
    const k = `${q.method}`;
    by.set(k, (by.get(k) ?? 0) + 1);
  }
  console.log(
    `| ${apply ? 'deleting' : 'dry'} | ${N} | ${res.deleted.length} | ${reqs.length} | ${[...by].map(([k, v]) => `${k} ${v}`).join(', ')} | ${Math.round(ms)} ms | exit ${res.exitCode} |`,
  );
}
await kube.close();
await t.close();
await os.stop();
