/** A config's rules: read, compiled and checked (the catalogue, shared/catalogue.ts, adds them to the built-in functions). */
import { dirname, isAbsolute, join } from 'node:path';
import type { Config } from '../config.ts';
import { ConfigError } from '../errors.ts';
import { type AnyRule, isCloudRule } from './access.ts';
import { compileCloudRule, isCloudRuleDoc } from './cloud-rule.ts';
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

export type RulesOf = Pick<Config, 'rules' | 'source'>;

/**
 * The rules a config declares, compiled (a file entry is read relative to the config file);
 * `reserved`: the built-in functions' names, which no rule may take.
 */
export function rulesOf(cfg: RulesOf, reserved: readonly string[]): AnyRule[] {
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
  checkRuleNames(out, reserved);
  return out;
}

/** Rule names are unique and none is a built-in function's, `reserved` (such a rule could never load). */
export function checkRuleNames(rules: readonly AnyRule[], reserved: readonly string[]): void {
  const seen = new Set(reserved);
  for (const r of rules) {
    if (seen.has(r.name))
      throw new ConfigError(
        `rule ${r.name} (${r.source}): a function of that name exists already; rule names must be unique and differ from ${reserved.join(', ')}`,
      );
    seen.add(r.name);
  }
}
