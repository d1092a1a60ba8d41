/** The function registry of a config: the built-in functions, then the config's rules. */
import { dirname, isAbsolute, join } from 'node:path';
import { FUNCTIONS } from '../../functions/index.ts';
import type { Config } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import { ConfigError } from '../errors.ts';
import { type AnyRule, isCloudRule } from './access.ts';
import { cloudRuleFunction } from './cloud-function.ts';
import { compileCloudRule, isCloudRuleDoc } from './cloud-rule.ts';
import { ruleFunction } from './function.ts';
import { compileRule, readRuleDocs } from './rule.ts';

/** A rule of either kind: its targets in Kubernetes, or in OpenStack (`target.openstack`). */
export { type AnyRule, isCloudRule };

/** Compiles one rule document of either kind. */
export function compileAnyRule(doc: unknown, source: string): AnyRule {
  return isCloudRuleDoc(doc) ? compileCloudRule(doc, source) : compileRule(doc, source);
}

/** Reads and compiles the rules of a file, of either kind. */
export function loadAnyRuleFile(path: string): AnyRule[] {
  return readRuleDocs(path).map((d) => compileAnyRule(d, path));
}

type RulesOf = Pick<Config, 'rules' | 'source'>;

/** The rules a config declares, compiled (a file entry is read relative to the config file). */
export function rulesOf(cfg: RulesOf): AnyRule[] {
  const base = cfg.source === 'defaults' || cfg.source === 'test' ? process.cwd() : dirname(cfg.source);
  const out: AnyRule[] = [];
  cfg.rules.forEach((entry, i) => {
    const keys = Object.keys(entry);
    if (keys.length === 1 && keys[0] === 'file') {
      if (typeof entry.file !== 'string' || entry.file === '')
        throw new ConfigError(`config ${cfg.source}: \`rules.${i}.file\`: expected a path`);
      out.push(...loadAnyRuleFile(isAbsolute(entry.file) ? entry.file : join(base, entry.file)));
    } else out.push(compileAnyRule(entry, `config ${cfg.source} rules.${i}`));
  });
  checkRuleNames(out);
  return out;
}

/** Rule names are unique and none is a built-in function's (such a rule could never load). */
export function checkRuleNames(rules: readonly AnyRule[]): void {
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
    fns =
      cfg.rules.length === 0
        ? FUNCTIONS
        : [
            ...FUNCTIONS,
            ...rulesOf(cfg).map((r) => (isCloudRule(r) ? cloudRuleFunction(r) : ruleFunction(r))),
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
