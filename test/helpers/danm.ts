/** Runs danm-endpoints against a KubeTarget on a simulated clock, capturing the diff log. */
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import type { FileConfig } from '../../shared/config.ts';
import type { KubeClientOptions } from '../../shared/kube/client.ts';
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
