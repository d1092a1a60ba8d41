import { Agent } from 'undici';
import { ADMIN_TOKEN, adminClient, realCluster } from '../cluster/cluster.ts';
import { kubeContract, rawGet } from './kube-contract.ts';

kubeContract(
  async () => {
    const c = await realCluster();
    if (!c) return undefined;
    console.log(`  kube contract against the real server: ${c.version} at ${c.server}`);
    const agent = new Agent({ connect: { rejectUnauthorized: false } });
    return {
      name: 'real',
      client: (extra = {}) => adminClient(c, ADMIN_TOKEN, extra),
      raw: (path, headers = {}, init = {}) =>
        rawGet(c.server, path, { authorization: `Bearer ${ADMIN_TOKEN}`, ...headers }, agent, init),
      // The API server's continue tokens name an etcd revision: compacting etcd past it expires them.
      // startCluster runs the API server with --etcd-compaction-interval=10s; its watch cache
      // drops list snapshots once it sees the compaction (it polls every 15 s). Then the token is 410.
      expireContinueTokens: async (probe) => {
        const until = Date.now() + 90_000;
        while ((await probe()) !== 410 && Date.now() < until)
          await new Promise((res) => setTimeout(res, 2000));
      },
      close: async () => {
        await agent.close();
      },
    };
  },
  { off: process.env.TWOPASS_NO_REAL_CLUSTER === '1' },
);
