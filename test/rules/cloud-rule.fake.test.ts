import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KEEP_MARK } from '../../shared/contract/index.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { fakeTarget } from '../helpers/kube-target.ts';
import { cloudRuleScenarios } from './cloud-scenarios.ts';

cloudRuleScenarios(
  'fake API server + fake Neutron',
  () => fakeTarget(),
  async () => {
    const os = new FakeOpenStack();
    await os.start();
    const dir = mkdtempSync(join(tmpdir(), 'twopass-cloud-rule-'));
    writeFileSync(join(dir, 'clouds.yaml'), os.cloudsYaml('appcred', 'fake'));
    writeFileSync(join(dir, 'admin.yaml'), os.cloudsYaml('admin', 'fake'));
    return {
      env: { OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') },
      projectId: 'project-a',
      fip: async (description, portId) => {
        const port = portId ? os.ports.get(portId) : undefined;
        return os.addFip({
          description,
          floating_ip_address: `198.51.100.${os.fips.size + 1}`,
          port_id: portId ?? null,
          fixed_ip_address: port?.fixed_ips?.[0]?.ip_address ?? null,
        }).id;
      },
      port: async (securityGroups?: string[], deviceId?: string) =>
        os.addPort({
          fixed_ips: [{ ip_address: `10.1.0.${os.ports.size + 10}` }],
          ...(securityGroups ? { security_groups: securityGroups } : {}),
          ...(deviceId ? { device_id: deviceId } : {}),
        }).id,
      portGroups: async (id) => [
        ...((os.ports.get(id) as { security_groups?: string[] }).security_groups ?? []),
      ],
      exists: async (id) => os.fips.has(id),
      touch: async (id) => {
        os.update(os.fips.get(id)!, { description: `${os.fips.get(id)!.description}` });
      },
      keep: async (id) => {
        const fip = os.fips.get(id)!;
        os.update(fip, { tags: [...(fip.tags ?? []), KEEP_MARK].sort() });
      },
      adminEnv: { OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'admin.yaml') },
      foreignFip: async (description) =>
        os.addFip({
          description,
          project_id: 'admin-project',
          floating_ip_address: `198.51.100.${os.fips.size + 1}`,
        }).id,
      foreignExists: async (id) => os.fips.has(id),
      sg: async (name, description) => os.addSecurityGroup({ name, description }).id,
      sgExists: async (id) => os.securityGroups.has(id),
      close: () => os.stop(),
    };
  },
);
