import { KubeHttpClient } from '../../shared/kube/client.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { installCrds } from '../cluster/cluster.ts';
import { testTime } from '../helpers/time.ts';
import { kubeContract, rawGet } from './kube-contract.ts';

kubeContract(async () => {
  // the fake's own clock: continue tokens expire when it moves past their lifetime
  let now = Date.now();
  const fake = new FakeKubeServer({ now: () => new Date(now), continueTtlMs: 300_000 });
  await fake.start();
  const admin = new KubeHttpClient({ server: fake.url, time: testTime() });
  await installCrds(admin, new URL('../../shared/sandbox/crds/', import.meta.url).pathname);
  await admin.close();
  return {
    name: 'fake',
    client: (extra = {}) => new KubeHttpClient({ server: fake.url, time: testTime(), ...extra }),
    raw: (path, headers = {}, init = {}) => rawGet(fake.url, path, headers, undefined, init),
    expireContinueTokens: async () => {
      now += 300_001;
    },
    close: () => fake.stop(),
  };
});
