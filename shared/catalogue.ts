/**
 * The catalogue of a config: the built-in functions, then the config's rules. The entry
 * points (the CLI, the scheduler, the FaaS handler) read it; the library below them never
 * imports the built-in functions.
 */
import { FUNCTIONS } from '../functions/index.ts';
import type { AnyFunction } from './contract/index.ts';
import { ConfigError } from './errors.ts';
import type { AnyRule } from './rules/access.ts';
import { cloudRuleFunction } from './rules/cloud-function.ts';
import { ruleFunction } from './rules/function.ts';
import { checkRuleNames as checkNames, isCloudRule, type RulesOf, rulesOf } from './rules/registry.ts';

const BUILT_IN = FUNCTIONS.map((f) => f.name);

/** Rule names are unique and none is a built-in function's. */
export const checkRuleNames = (rules: readonly AnyRule[]): void => checkNames(rules, BUILT_IN);

const registries = new WeakMap<object, readonly AnyFunction[]>();

/** Every function of a config: the built-in ones, then its rules. */
export function functionsOf(cfg: RulesOf): readonly AnyFunction[] {
  let fns = registries.get(cfg);
  if (!fns) {
    fns =
      cfg.rules.length === 0
        ? FUNCTIONS
        : [
            ...FUNCTIONS,
            ...rulesOf(cfg, BUILT_IN).map((r) => (isCloudRule(r) ? cloudRuleFunction(r) : ruleFunction(r))),
          ];
    registries.set(cfg, fns);
  }
  return fns;
}

export function findFunction(name: string, cfg: RulesOf): AnyFunction | undefined {
  return functionsOf(cfg).find((f) => f.name === name);
}

/** The function of this name, or a usage error that lists the known ones. */
export function requireFunction(name: string, cfg: RulesOf): AnyFunction {
  const fn = findFunction(name, cfg);
  if (fn) return fn;
  throw new ConfigError(
    `unknown function \`${name}\`; known: ${functionsOf(cfg)
      .map((f) => f.name)
      .join(', ')}`,
  );
}
