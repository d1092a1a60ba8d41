import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { osContract } from './os-contract.ts';

osContract('fake Keystone + Neutron', async () => {
  const os = new FakeOpenStack();
  await os.start();
  return {
    name: 'fake',
    cloudsYaml: (kind, region) =>
      os
        .cloudsYaml(kind, 'contract')
        .replace('region_name: RegionOne', `region_name: ${region ?? 'RegionOne'}`),
    authUrl: os.authUrl,
    projectId: 'project-a',
    close: () => os.stop(),
  };
});
