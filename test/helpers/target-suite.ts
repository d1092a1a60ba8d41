/** A uvu suite bound to a KubeTarget (the real API server or the fake); skipped when there is none. */
import { suite } from 'uvu';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { type KubeTarget, realTarget } from './kube-target.ts';

export function targetSuite(name: string, getTarget: () => Promise<KubeTarget | undefined>) {
  const test = suite<{ t?: KubeTarget; kube?: KubeHttpClient }>(name);
  let skip = false;
  test.before(async (ctx) => {
    const t = await getTarget();
    if (!t) {
      skip = true;
      return;
    }
    ctx.t = t;
    ctx.kube = t.client();
  });
  test.after(async (ctx) => {
    await ctx.kube?.close();
    await ctx.t?.close();
  });
  // Without the real API server, its tests are reported as skipped, never counted as passed.
  const off = getTarget === realTarget && process.env.TWOPASS_NO_REAL_CLUSTER === '1';
  const it = (title: string, fn: (t: KubeTarget, kube: KubeHttpClient) => Promise<void>) =>
    (off ? test.skip : test)(title, async (ctx) => {
      if (skip) return;
      await fn(ctx.t!, ctx.kube!);
    });
  return { it, run: () => test.run() };
}
