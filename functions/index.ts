/** The function registry: every function twopass can run. */
import type { AnyFunction } from '../shared/runtime/function.ts';
import { danmEndpoints } from './danm-endpoints/index.ts';
import { lbaasPorts } from './lbaas-ports/index.ts';
import { whereaboutsIps } from './whereabouts-ips/index.ts';

export type FunctionEntry = Readonly<{
  fn: AnyFunction;
  /** Which clients the function's ports are made of. */
  needs: readonly ('kube' | 'openstack')[];
}>;

export const FUNCTIONS: readonly FunctionEntry[] = [
  { fn: danmEndpoints, needs: ['kube'] },
  { fn: whereaboutsIps, needs: ['kube'] },
  { fn: lbaasPorts, needs: ['kube', 'openstack'] },
];

export function findFunction(name: string): FunctionEntry | undefined {
  return FUNCTIONS.find((e) => e.fn.name === name);
}
