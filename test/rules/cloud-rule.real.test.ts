import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { realTarget } from '../helpers/kube-target.ts';
import { realOpenStack } from '../openstack/real-openstack.ts';
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
        port: async () =>
          ((await neutron('POST', '/ports', { port: { network_id: os.networkId } })).port as { id: string })
            .id,
        exists,
        touch: async (id: string) => {
          await neutron('PUT', `/floatingips/${id}/tags`, { tags: ['touched'] });
        },
        close: async () => {},
      };
    }),
);
