import { MAX_LIMIT } from '../../shared/sandbox/openstack/cinder-rules.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { cinderContract } from './cinder-contract.ts';

cinderContract("the fake's Cinder", async () => {
  const os = new FakeOpenStack();
  await os.start();
  // distinct creation times, one second apart, as volumes made one after another have
  let n = 0;
  // the requests of the running case only
  let from = 0;
  const base = Date.UTC(2026, 0, 1);
  return {
    name: 'fake',
    cloudsYaml: (kind) => os.cloudsYaml(kind === 'admin' ? 'admin' : 'appcred', 'contract'),
    projectId: 'project-a',
    adminProjectId: 'admin-project',
    maxLimit: MAX_LIMIT,
    makeVolume: async (o = {}) =>
      os.addVolume({
        created_at: new Date(base + ++n * 1000).toISOString(),
        ...(o.metadata ? { metadata: o.metadata } : {}),
        ...(o.admin ? { project_id: 'admin-project' } : {}),
      }),
    paths: () => os.requests.slice(from).map((r) => r.path),
    reset: async () => {
      os.volumes.clear();
      from = os.requests.length;
    },
    close: () => os.stop(),
  };
});
