/** The function registry: every function twopass can run, built in and defined by the config's rules. */
import { dirname, isAbsolute, join } from 'node:path';
import type { Config } from '../shared/config.ts';
import type { AnyFunction } from '../shared/contract/index.ts';
import { ConfigError } from '../shared/errors.ts';
import { ruleFunction } from '../shared/rules/function.ts';
import { compileRule, loadRuleFile, type Rule } from '../shared/rules/rule.ts';
import { danmEndpoints } from './danm-endpoints/index.ts';
import { lbaasPorts } from './lbaas-ports/index.ts';
import { whereaboutsIps } from './whereabouts-ips/index.ts';

/** The built-in functions. */
export const FUNCTIONS: readonly AnyFunction[] = [danmEndpoints, whereaboutsIps, lbaasPorts];

type RulesOf = Pick<Config, 'rules' | 'source'>;

/** The rules a config declares, compiled (a file entry is read relative to the config file). */
export function rulesOf(cfg: RulesOf): Rule[] {
  const base = cfg.source === 'defaults' || cfg.source === 'test' ? process.cwd() : dirname(cfg.source);
  const out: Rule[] = [];
  cfg.rules.forEach((entry, i) => {
    const keys = Object.keys(entry);
    if (keys.length === 1 && keys[0] === 'file') {
      if (typeof entry.file !== 'string' || entry.file === '')
        throw new ConfigError(`config ${cfg.source}: \`rules.${i}.file\`: expected a path`);
      out.push(...loadRuleFile(isAbsolute(entry.file) ? entry.file : join(base, entry.file)));
    } else out.push(compileRule(entry, `config ${cfg.source} rules.${i}`));
  });
  const seen = new Set(FUNCTIONS.map((f) => f.name));
  for (const r of out) {
    if (seen.has(r.name))
      throw new ConfigError(
        `rule ${r.name} (${r.source}): a function of that name exists already; rule names must be unique and differ from ${FUNCTIONS.map((f) => f.name).join(', ')}`,
      );
    seen.add(r.name);
  }
  return out;
}

const registries = new WeakMap<object, readonly AnyFunction[]>();

/** Every function of a config: the built-in ones, then its rules. */
export function functionsOf(cfg: RulesOf): readonly AnyFunction[] {
  let fns = registries.get(cfg);
  if (!fns) {
    fns = cfg.rules.length === 0 ? FUNCTIONS : [...FUNCTIONS, ...rulesOf(cfg).map(ruleFunction)];
    registries.set(cfg, fns);
  }
  return fns;
}

export function findFunction(name: string, cfg?: RulesOf): AnyFunction | undefined {
  return (cfg ? functionsOf(cfg) : FUNCTIONS).find((f) => f.name === name);
}
