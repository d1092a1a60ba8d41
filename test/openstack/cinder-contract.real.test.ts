/**
 * The Cinder contract against a real Cinder (Debian's, on its fake volume driver) beside the
 * real Keystone and MariaDB: a project and user of its own, osapi_max_limit 5 so that the
 * cap is reached with six volumes. Without the real OpenStack or Cinder's packages the suite
 * is SKIPPED, and said so; with TWOPASS_REQUIRE_REAL_OPENSTACK=1 (CI) that is a failure.
 */
import { randomUUID } from 'node:crypto';
import { cinderContract } from './cinder-contract.ts';
import { cinderMissing, startCinder } from './real-cinder.ts';
import { call, ok, passwordToken, realOpenStack, until } from './real-openstack.ts';

const os = realOpenStack();
const missing = os ? cinderMissing() : 'no real Keystone + Neutron (TWOPASS_TEST_OPENSTACK unset)';
if (missing) {
  console.log(`  !!! no real Cinder (${missing}): the real Cinder contract is SKIPPED`);
  if (os && process.env.TWOPASS_REQUIRE_REAL_OPENSTACK === '1') {
    console.error(
      `a real Cinder is required with the real OpenStack (TWOPASS_REQUIRE_REAL_OPENSTACK=1): ${missing}`,
    );
    process.exitCode = 1;
  }
}

cinderContract(
  'a real Cinder (Debian, fake volume driver)',
  os && !missing
    ? async () => {
        const cinder = await startCinder(os, { maxLimit: 5 });
        console.log(`  Cinder contract against the real Cinder at ${cinder.url}`);
        const admin = await passwordToken(os.authUrl, 'admin', os.admin.password, 'admin');
        // a project of the suite's own: its listings hold exactly what the cases made
        const name = `cinder-contract-${randomUUID().slice(0, 6)}`;
        const project = (
          (await ok('POST', `${os.authUrl}/projects`, admin, { project: { name, domain_id: 'default' } }))
            .project as { id: string }
        ).id;
        const user = (
          (
            await ok('POST', `${os.authUrl}/users`, admin, {
              user: { name, password: 'contract-pw', domain_id: 'default' },
            })
          ).user as { id: string }
        ).id;
        const member = (
          (await ok('GET', `${os.authUrl}/roles?name=member`, admin)).roles as { id: string }[]
        )[0]!.id;
        await ok('PUT', `${os.authUrl}/projects/${project}/users/${user}/roles/${member}`, admin);
        const adminProject = (
          (await ok('GET', `${os.authUrl}/projects?name=admin`, admin)).projects as { id: string }[]
        )[0]!.id;
        const token = async (asAdmin: boolean) =>
          asAdmin
            ? passwordToken(os.authUrl, 'admin', os.admin.password, 'admin')
            : passwordToken(os.authUrl, name, 'contract-pw', name);
        const volumes = (p: string) => `${cinder.url}/v3/${p}/volumes`;
        const yaml = (u: string, pw: string, p: string) =>
          `clouds:\n  contract:\n    region_name: ${os.region}\n    interface: public\n    auth:\n      auth_url: ${os.authUrl}\n      username: ${u}\n      password: ${pw}\n      user_domain_name: Default\n      project_name: ${p}\n      project_domain_name: Default\n`;
        return {
          name: 'real',
          cloudsYaml: (kind) =>
            kind === 'admin' ? yaml('admin', os.admin.password, 'admin') : yaml(name, 'contract-pw', name),
          projectId: project,
          adminProjectId: adminProject,
          maxLimit: cinder.maxLimit,
          makeVolume: async (o = {}) => {
            const p = o.admin ? adminProject : project;
            const t = await token(o.admin === true);
            const v = (
              await ok('POST', volumes(p), t, {
                volume: { size: 1, ...(o.metadata ? { metadata: o.metadata } : {}) },
              })
            ).volume as { id: string };
            await until(`volume ${v.id} available`, 60_000, async () => {
              const s = ((await ok('GET', `${volumes(p)}/${v.id}`, t)).volume as { status: string }).status;
              if (s === 'error') throw new Error(`volume ${v.id} went to error (see ${cinder.dir})`);
              return s === 'available' ? true : undefined;
            });
            return { id: v.id };
          },
          reset: async () => {
            for (const [p, asAdmin] of [
              [project, false],
              [adminProject, true],
            ] as const) {
              const t = await token(asAdmin);
              const list = () =>
                ok('GET', `${volumes(p)}/detail`, t).then(
                  (b) => (b.volumes as { id: string; status: string }[]) ?? [],
                );
              // a page holds at most osapi_max_limit: delete what each listing shows until none is left
              await until(`the volumes of ${p} are gone`, 120_000, async () => {
                const left = await list();
                for (const v of left)
                  if (v.status !== 'deleting') await call('DELETE', `${volumes(p)}/${v.id}`, t);
                return left.length === 0 ? true : undefined;
              });
            }
          },
          close: () => cinder.stop(),
        };
      }
    : undefined,
);
