import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KEEP_MARK } from '../../shared/contract/index.ts';
import { realTarget } from '../helpers/kube-target.ts';
import { passwordToken, realOpenStack } from '../openstack/real-openstack.ts';
import { realWorld } from '../openstack/real-world.ts';
import { cloudRuleScenarios } from './cloud-scenarios.ts';

// Both real servers or nothing: the suite is reported as skipped without either.
const os = process.env.TWOPASS_NO_REAL_CLUSTER === '1' ? undefined : realOpenStack();
if (!os)
  console.log(
    '  !!! no real Keystone + Neutron and kube-apiserver: the cloud rule on the real OpenStack is SKIPPED',
  );
const { neutron } = realWorld(os);

cloudRuleScenarios(
  'real kube-apiserver + real Keystone and Neutron',
  realTarget,
  os &&
    (async () => {
      const dir = mkdtempSync(join(tmpdir(), 'twopass-cloud-rule-real-'));
      writeFileSync(
        join(dir, 'clouds.yaml'),
        `clouds:\n  real:\n    auth_type: v3applicationcredential\n    region_name: ${os.region}\n    interface: public\n    auth:\n      auth_url: ${os.authUrl}\n      application_credential_id: ${os.appCred.id}\n      application_credential_secret: ${os.appCred.secret}\n`,
      );
      writeFileSync(
        join(dir, 'admin.yaml'),
        `clouds:\n  real:\n    region_name: ${os.region}\n    interface: public\n    auth:\n      auth_url: ${os.authUrl}\n      username: admin\n      password: ${os.admin.password}\n      user_domain_name: Default\n      project_name: admin\n      project_domain_name: Default\n`,
      );
      const adminToken = await passwordToken(os.authUrl, 'admin', os.admin.password, 'admin');
      const exists = async (id: string) => !(await neutron('GET', `/floatingips/${id}`)).notFound;
      return {
        env: { OS_CLOUD: 'real', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') },
        projectId: os.project.id,
        fip: async (description: string, portId?: string) =>
          (
            (
              await neutron('POST', '/floatingips', {
                floatingip: {
                  floating_network_id: os.externalNetworkId,
                  description,
                  ...(portId ? { port_id: portId } : {}),
                },
              })
            ).floatingip as { id: string }
          ).id,
        port: async (securityGroups?: string[], deviceId?: string) =>
          (
            (
              await neutron('POST', '/ports', {
                port: {
                  network_id: os.networkId,
                  ...(securityGroups ? { security_groups: securityGroups } : {}),
                  ...(deviceId ? { device_id: deviceId } : {}),
                },
              })
            ).port as { id: string }
          ).id,
        portGroups: async (id: string) =>
          ((await neutron('GET', `/ports/${id}`)).port as { security_groups: string[] }).security_groups,
        exists,
        touch: async (id: string) => {
          await neutron('PUT', `/floatingips/${id}/tags`, { tags: ['touched'] });
        },
        keep: async (id: string) => {
          await neutron('PUT', `/floatingips/${id}/tags`, { tags: [KEEP_MARK] });
        },
        adminEnv: { OS_CLOUD: 'real', OS_CLIENT_CONFIG_FILE: join(dir, 'admin.yaml') },
        foreignFip: async (description: string) => {
          const res = await fetch(`${os.neutronUrl}/v2.0/floatingips`, {
            method: 'POST',
            headers: { 'x-auth-token': adminToken, 'content-type': 'application/json' },
            body: JSON.stringify({ floatingip: { floating_network_id: os.externalNetworkId, description } }),
          });
          if (res.status !== 201) throw new Error(`admin FIP: ${res.status} ${await res.text()}`);
          return ((await res.json()) as { floatingip: { id: string } }).floatingip.id;
        },
        foreignExists: async (id: string) =>
          (
            await fetch(`${os.neutronUrl}/v2.0/floatingips/${id}`, {
              headers: { 'x-auth-token': adminToken },
            })
          ).status === 200,
        sg: async (name: string, description: string) =>
          (
            (await neutron('POST', '/security-groups', { security_group: { name, description } }))
              .security_group as { id: string }
          ).id,
        sgExists: async (id: string) => !(await neutron('GET', `/security-groups/${id}`)).notFound,
        close: async () => {},
      };
    }),
);
