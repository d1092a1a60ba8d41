/**
 * Function settings, validated when the config loads: each function declares a strict
 * zod schema for `functions.<name>.settings`; an unknown key or a wrong type is a
 * ConfigError that names the key, never a setting silently dropped (a dropped
 * `namespaces` would widen the scope to every namespace).
 */
import type { AnyFunction, ParsedSettings } from '../contract/index.ts';
import { ConfigError, issuesText } from '../errors.ts';

/**
 * Parses one function's settings with its schema: the one parse of them, where the config
 * loads; the error names `functions.<fn>.settings.<key>`.
 */
export function validateSettings(
  fn: AnyFunction,
  settings: Readonly<Record<string, unknown>>,
  where: string,
): ParsedSettings {
  const r = fn.settingsSchema.safeParse(settings);
  if (r.success) return Object.freeze(r.data) as ParsedSettings;
  throw new ConfigError(
    issuesText(r.error, {
      where,
      prefix: ['functions', fn.name, 'settings'],
      known: Object.keys(fn.settingsSchema.shape),
    }),
  );
}

/** Every function the config names: known, and its settings valid. */
export function checkFunctionsConfig(
  functions: Readonly<
    Record<
      string,
      {
        settings?: Readonly<Record<string, unknown>> | undefined;
        kindGrace?: Readonly<Record<string, number>> | undefined;
      }
    >
  >,
  known: readonly AnyFunction[],
  where: string,
): void {
  for (const [name, f] of Object.entries(functions)) {
    if (name === '*') continue;
    const fn = known.find((k) => k.name === name);
    if (!fn)
      throw new ConfigError(
        `${where}: \`functions.${name}\`: unknown function; known: ${known.map((k) => k.name).join(', ')}`,
      );
    checkKindGrace(fn, f.kindGrace, where);
    validateSettings(fn, f.settings ?? {}, where);
  }
}

/** Every kind `kindGrace` names is one of the function's: a misspelt kind would wait the shorter grace. */
export function checkKindGrace(
  fn: AnyFunction,
  kindGrace: Readonly<Record<string, number>> | undefined,
  where: string,
): void {
  const kinds = Object.keys(fn.kindReport);
  for (const kind of Object.keys(kindGrace ?? {}))
    if (!kinds.includes(kind))
      throw new ConfigError(
        `${where}: \`functions.${fn.name}.kindGrace.${kind}\`: unknown kind; the kinds of ${fn.name}: ${kinds.join(', ')}`,
      );
}
