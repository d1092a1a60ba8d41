/**
 * Building blocks of function settings schemas, and the description of a schema that
 * `twopass functions` prints (each key, its type, its default, what it does). Zod errors
 * are worded in one place, `issuesText` in shared/errors.ts.
 */
import { z } from 'zod';

export function describeValue(v: unknown): string {
  if (typeof v === 'string') return `\`${v}\` (string)`;
  if (v === null) return '`null`';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'an object';
  return `\`${String(v)}\` (${typeof v})`;
}

declare const parsedBrand: unique symbol;

/**
 * A function's settings as its own schema gave them, where the config loaded
 * (`validateSettings` in the runtime makes them, nothing else): the contract hands them
 * to the function as they are, never parsing them again.
 */
export type ParsedSettings = Readonly<Record<string, unknown>> & { readonly [parsedBrand]: true };

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

/** A non-empty string; `what` names it in the error. */
export const nonEmpty = (what: string) =>
  z
    .string({ error: (i) => `expected ${what}, got ${describeValue(i.input)}` })
    .min(1, { error: `expected ${what}, got an empty string` });

export type SettingInfo = Readonly<{ key: string; type: string; default?: unknown; description?: string }>;

/** What `twopass functions` prints about a settings schema: one line a key. */
export function describeSettings(schema: z.ZodObject): SettingInfo[] {
  return Object.entries(schema.shape).map(([key, s]) => {
    const t = s as z.ZodType;
    const description = t.description;
    let inner: z.ZodType = t;
    let dflt: unknown;
    for (;;) {
      if (inner instanceof z.ZodDefault) {
        dflt = (inner.def as { defaultValue: unknown }).defaultValue;
        inner = inner.def.innerType as z.ZodType;
      } else if (inner instanceof z.ZodOptional) inner = inner.def.innerType as z.ZodType;
      else break;
    }
    return {
      key,
      type: typeName(inner),
      ...(dflt !== undefined ? { default: dflt } : {}),
      ...(description ? { description } : {}),
    };
  });
}

function typeName(t: z.ZodType): string {
  if (t instanceof z.ZodEnum) return (t.options as string[]).join(' | ');
  if (t instanceof z.ZodArray) return `list of ${typeName(t.element as z.ZodType)}`;
  if (t instanceof z.ZodNumber) return t.isInt ? 'integer' : 'number';
  if (t instanceof z.ZodString) return 'string';
  if (t instanceof z.ZodBoolean) return 'boolean';
  return t.def.type;
}
