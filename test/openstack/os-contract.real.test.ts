import { osContract } from './os-contract.ts';
import { realOpenStack } from './real-openstack.ts';

const os = realOpenStack();
if (!os)
  console.log(
    '  !!! no real Keystone + Neutron (TWOPASS_TEST_OPENSTACK unset): the real OpenStack contract is SKIPPED',
  );
osContract(
  'real Keystone + Neutron',
  os &&
    (async () => {
      console.log(`  OpenStack contract against the real Keystone + Neutron at ${os.authUrl}`);
      return {
        name: 'real',
        cloudsYaml: (kind, region) => {
          const auth =
            kind === 'admin'
              ? `      auth_url: ${os.authUrl}\n      username: admin\n      password: ${os.admin.password}\n      user_domain_name: Default\n      project_name: admin\n      project_domain_name: Default\n`
              : kind === 'password'
                ? `      auth_url: ${os.authUrl}\n      username: ${os.user.name}\n      password: ${os.user.password}\n      user_domain_name: Default\n      project_name: ${os.project.name}\n      project_domain_name: Default\n`
                : `      auth_url: ${os.authUrl}\n      application_credential_id: ${os.appCred.id}\n      application_credential_secret: ${os.appCred.secret}\n`;
          return `clouds:\n  contract:\n${kind === 'appcred' ? '    auth_type: v3applicationcredential\n' : ''}    region_name: ${region ?? os.region}\n    interface: public\n    auth:\n${auth}`;
        },
        authUrl: os.authUrl,
        projectId: os.project.id,
        networkId: os.networkId,
        subnetId: os.subnetId,
        floatingNetworkId: os.externalNetworkId,
        close: async () => {},
      };
    }),
);
