/** The built-in functions. A config's rules join them in shared/rules/registry.ts. */
import type { AnyFunction } from '../shared/contract/index.ts';
import { danmEndpoints } from './danm-endpoints/index.ts';
import { lbaasPorts } from './lbaas-ports/index.ts';
import { whereaboutsIps } from './whereabouts-ips/index.ts';

/** The built-in functions. */
export const FUNCTIONS: readonly AnyFunction[] = [danmEndpoints, whereaboutsIps, lbaasPorts];

export function findFunction(name: string): AnyFunction | undefined {
  return FUNCTIONS.find((f) => f.name === name);
}
