/** The function registry of a config: the built-in functions, then the config's rules. */
import { dirname, isAbsolute, join } from 'node:path';
import { FUNCTIONS } from '../../functions/index.ts';
import type { Config } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import { ConfigError } from '../errors.ts';
import { ruleFunction } from './function.ts';
import { compileRule, loadRuleFile, type Rule } from './rule.ts';

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
  checkRuleNames(out);
  return out;
}

/** Rule names are unique and none is a built-in function's (such a rule could never load). */
export function checkRuleNames(rules: readonly Rule[]): void {
  const seen = new Set(FUNCTIONS.map((f) => f.name));
  for (const r of rules) {
    if (seen.has(r.name))
      throw new ConfigError(
        `rule ${r.name} (${r.source}): a function of that name exists already; rule names must be unique and differ from ${FUNCTIONS.map((f) => f.name).join(', ')}`,
      );
    seen.add(r.name);
  }
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

export function findFunction(name: string, cfg: RulesOf): AnyFunction | undefined {
  return functionsOf(cfg).find((f) => f.name === name);
}
