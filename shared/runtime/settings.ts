/**
 * Function settings, validated when the config loads: each function declares a strict
 * zod schema for `functions.<name>.settings`; an unknown key or a wrong type is a
 * ConfigError that names the key, never a setting silently dropped (a dropped
 * `namespaces` would widen the scope to every namespace).
 */
import { z } from 'zod';
import { ConfigError } from './errors.ts';
import type { AnyFunction } from './function.ts';

export function describeValue(v: unknown): string {
  if (typeof v === 'string') return `\`${v}\` (string)`;
  if (v === null) return '`null`';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'an object';
  return `\`${String(v)}\` (${typeof v})`;
}

/** A list of namespace names (DNS-1123 labels). */
export const namespacesSetting = z.array(
  z
    .string({ error: (i) => `expected a namespace name, got ${describeValue(i.input)}` })
    .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, {
      error: (i) => `expected a namespace name, got ${describeValue(i.input)}`,
    }),
  { error: (i) => `expected a list of namespaces like \`[default]\`, got ${describeValue(i.input)}` },
);

export const pageSizeSetting = z
  .number({ error: (i) => `expected a page size (1-10000), got ${describeValue(i.input)}` })
  .int()
  .min(1)
  .max(10_000);

/** Parses one function's settings with its schema; the error names `functions.<fn>.settings.<key>`. */
export function validateSettings(
  fn: AnyFunction,
  settings: Readonly<Record<string, unknown>>,
  where: string,
): Readonly<Record<string, unknown>> {
  if (!fn.settingsSchema) return settings;
  const r = fn.settingsSchema.safeParse(settings);
  if (r.success) return Object.freeze(r.data as Record<string, unknown>);
  throw new ConfigError(
    r.error.issues
      .map((i) => {
        const key = ['functions', fn.name, 'settings', ...i.path.map(String)].join('.');
        const msg =
          i.code === 'unrecognized_keys'
            ? `unknown key(s) ${i.keys.map((k) => `\`${k}\``).join(', ')} (known: ${Object.keys((fn.settingsSchema as z.ZodObject).shape ?? {}).join(', ')})`
            : i.message;
        return `${where}: \`${key}\`: ${msg}`;
      })
      .join('\n'),
  );
}

/** Every function the config names: known, and its settings valid. */
export function checkFunctionsConfig(
  functions: Readonly<Record<string, { settings?: Readonly<Record<string, unknown>> | undefined }>>,
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
    validateSettings(fn, f.settings ?? {}, where);
  }
}
