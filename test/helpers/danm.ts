/** Runs danm-endpoints against a KubeTarget on a simulated clock, capturing the diff log. */
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import type { FileConfig } from '../../shared/config.ts';
import type { KubeClientOptions } from '../../shared/kube/client.ts';
import type { KubeClient } from '../../shared/kube/ports.ts';
import { setBits } from '../../shared/sandbox/scenarios/danm.ts';
import { type Runner, runner } from './runner.ts';

export type DanmRunner = Runner;

export function danmRunner(
  options: Omit<KubeClientOptions, 'time'>,
  namespaces: string[],
  start: number,
  extra: FileConfig['functions'] = {},
): DanmRunner {
  return runner(danmEndpoints, options, namespaces, start, extra?.['danm-endpoints'] ?? {});
}

/**
 * A writer in the background, as pods come and go: it sets and clears another address of the
 * network's 10.10.10.0/24 (two writes, `spread` addresses in turn from .100), pauses `pauseMs`,
 * and goes on until stopped. `writes` counts its writes; `written()` waits for two more.
 */
export function backgroundWriter(kube: KubeClient, ns: string, net: string, pauseMs: number, spread = 10) {
  let stopping = false;
  let loop: Promise<void> = Promise.resolve();
  const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));
  const w = {
    writes: 0,
    async written(): Promise<void> {
      const before = w.writes;
      while (w.writes < before + 2) await sleep(20);
    },
    async stop(): Promise<void> {
      stopping = true;
      await loop;
    },
  };
  loop = (async () => {
    for (let i = 0; !stopping; i++) {
      const a = `10.10.10.${100 + (i % spread)}`;
      await setBits(kube, ns, net, [a], true).catch(() => undefined);
      await setBits(kube, ns, net, [a], false).catch(() => undefined);
      w.writes += 2;
      await sleep(pauseMs);
    }
  })();
  return w;
}
