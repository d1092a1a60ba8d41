import { KubeHttpClient } from '../../shared/kube/client.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { installCrds } from '../cluster/cluster.ts';
import { testTime } from '../helpers/time.ts';
import { kubeContract, rawGet } from './kube-contract.ts';

kubeContract(async () => {
  const fake = new FakeKubeServer();
  await fake.start();
  const admin = new KubeHttpClient({ server: fake.url, time: testTime() });
  await installCrds(admin, new URL('../fixtures/crds/', import.meta.url).pathname);
  await admin.close();
  return {
    name: 'fake',
    client: () => new KubeHttpClient({ server: fake.url, time: testTime() }),
    raw: (path, headers = {}) => rawGet(fake.url, path, headers),
    expireContinueTokens: async () => fake.expireContinueTokens(),
    close: () => fake.stop(),
  };
});
