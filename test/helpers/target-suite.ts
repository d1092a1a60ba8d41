/**
 * A uvu suite bound to a target (the real API server or the fake): built once before the
 * suite, closed after it, with optional per-suite and per-test setup. Without its target
 * (`off`, or none returned) every test is reported as skipped, never counted as passed.
 */
import { suite } from 'uvu';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { type KubeTarget, realTarget } from './kube-target.ts';

type Closable = { client: () => KubeHttpClient; close: () => Promise<void> };

export type SuiteOptions<T, X> = {
  /** Known up front to be unavailable: every test is reported as skipped. */
  off?: boolean;
  /** Once, after the target is up (e.g. a namespace, a clouds.yaml). */
  setup?: (t: T, kube: KubeHttpClient) => Promise<X>;
  /** Around each test (e.g. a fresh fake OpenStack). */
  beforeEach?: (x: X) => Promise<void>;
  afterEach?: (x: X) => Promise<void>;
  /** Once, after the suite (what setup started). */
  teardown?: (x: X) => Promise<void>;
};

export function targetSuite<T extends Closable = KubeTarget, X extends object = object>(
  name: string,
  getTarget: () => Promise<T | undefined>,
  opts: SuiteOptions<T, X> = {},
) {
  const test = suite(name);
  let up: { t: T; kube: KubeHttpClient; x: X } | undefined;
  const off =
    opts.off === true ||
    (getTarget === (realTarget as unknown) && process.env.TWOPASS_NO_REAL_CLUSTER === '1');
  test.before(async () => {
    if (off) return;
    const t = await getTarget();
    if (!t) return;
    const kube = t.client();
    up = { t, kube, x: opts.setup ? await opts.setup(t, kube) : ({} as X) };
  });
  test.before.each(async () => {
    if (up && opts.beforeEach) await opts.beforeEach(up.x);
  });
  test.after.each(async () => {
    if (up && opts.afterEach) await opts.afterEach(up.x);
  });
  test.after(async () => {
    if (up && opts.teardown) await opts.teardown(up.x);
    await up?.kube.close();
    await up?.t.close();
  });
  const it = (title: string, fn: (t: T, kube: KubeHttpClient, x: X) => Promise<void>) =>
    (off ? test.skip : test)(title, async () => {
      // A target that should be there and is not is a failure, not a pass.
      if (!up) throw new Error(`${name}: its target is not available`);
      await fn(up.t, up.kube, up.x);
    });
  return { it, run: () => test.run() };
}
