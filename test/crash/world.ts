/**
 * The crash tests' world on the fake API server: two live DanmEps, three whose pods were
 * force-deleted, and one leaked bit, on test-net1; ConfigMap state in twopass-system.
 */
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { type KubeObject, NAMESPACES } from '../../shared/kube/resources.ts';
import {
  allocated,
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
  R,
  setBits,
} from '../../shared/sandbox/scenarios/danm.ts';
import { fakeTarget, type KubeTarget } from '../helpers/kube-target.ts';

export const STATE_NS = 'twopass-system';
export const LIVE = ['10.10.10.20', '10.10.10.21'];
export const ORPHANS = ['10.10.10.30', '10.10.10.31', '10.10.10.32'];
export const LEAKED = '10.10.10.40';
export const SETTLED = ['10.10.10.0', ...LIVE, '10.10.10.255'];

export type World = {
  t: KubeTarget;
  kube: KubeHttpClient;
  ns: string;
  live: KubeObject[];
  orphans: KubeObject[];
};

export const present = async (w: World, ep: KubeObject) =>
  (await w.kube.get(R.danmeps, w.ns, ep.metadata.name)) !== undefined;
export const bits = async (w: World) => allocated((await w.kube.get(R.DanmNet, w.ns, 'test-net1'))!);

export async function world(): Promise<World> {
  const t = await fakeTarget();
  const kube = t.client();
  const ns = await t.namespace();
  await kube.create(NAMESPACES, { metadata: { name: STATE_NS } });
  await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', []);
  const live: KubeObject[] = [];
  for (const [i, ip] of LIVE.entries())
    live.push(await createEndpoint(kube, await createPod(kube, ns, `live-${i}`), 'test-net1', `${ip}/24`));
  const orphans: KubeObject[] = [];
  for (const [i, ip] of ORPHANS.entries()) {
    orphans.push(await createEndpoint(kube, await createPod(kube, ns, `gone-${i}`), 'test-net1', `${ip}/24`));
    await forceDeletePod(kube, ns, `gone-${i}`);
  }
  await setBits(kube, ns, 'test-net1', [...LIVE, ...ORPHANS, LEAKED]);
  return { t, kube, ns, live, orphans };
}
