/**
 * CEL for rules: one environment, expressions compiled (parsed and type-checked) when
 * a rule loads, errors that name the rule, the field and the position. Kubernetes
 * objects are handed to CEL as Kubernetes' own CEL sees them: whole numbers are `int`.
 * Evaluation never throws past `evaluate`: an error is a value the caller turns into
 * "indeterminate" (unknown is not unused).
 */
import { Environment } from '@marcbachmann/cel-js';
import { ConfigError } from '../errors.ts';

/** The variables an expression of a field may read. */
export type Scope = 'object' | 'object+evidence';

const ENVS: Record<Scope, Environment> = {
  object: new Environment({ enableOptionalTypes: true }).registerVariable('object', 'map'),
  'object+evidence': new Environment({ enableOptionalTypes: true })
    .registerVariable('object', 'map')
    .registerVariable('evidence', 'map'),
};

export type Compiled = Readonly<{
  /** Where the expression sits: `rule NAME: FIELD`. */
  where: string;
  source: string;
  /** The type the checker inferred (`bool`, `string`, `dyn`...). */
  type: string;
  evaluate: (vars: Readonly<Record<string, unknown>>) => Evaluated;
}>;

export type Evaluated = Readonly<{ ok: true; value: unknown } | { ok: false; error: string }>;

/** `line L, column C` of a character offset. */
function position(source: string, offset: number | undefined): string {
  if (offset === undefined || offset < 0) return '';
  const before = source.slice(0, offset);
  const line = before.split('\n').length;
  const column = offset - before.lastIndexOf('\n');
  return `line ${line}, column ${column}: `;
}

/** The first line of a CEL error (the library appends a caret drawing) with its position. */
function describeCelError(source: string, err: unknown): string {
  const e = err as { message?: string; node?: { pos?: number } };
  const first = String(e.message ?? err).split('\n')[0]!;
  return `${position(source, e.node?.pos)}${first}`;
}

/**
 * Compiles one expression: a syntax or type error is a ConfigError naming `where` and
 * the position; `accepts` lists the result types the field allows (`dyn` always passes:
 * its value is checked when evaluated).
 */
export function compile(where: string, source: string, scope: Scope, accepts: readonly string[]): Compiled {
  const env = ENVS[scope];
  let program: (vars: Record<string, unknown>) => unknown;
  let type: string;
  try {
    program = env.parse(source) as (vars: Record<string, unknown>) => unknown;
    const checked = env.check(source);
    if (!checked.valid) throw checked.error;
    type = String(checked.type);
  } catch (err) {
    throw new ConfigError(`${where}: ${describeCelError(source, err)}`);
  }
  if (type !== 'dyn' && !accepts.some((a) => type === a || type.startsWith(`${a}<`)))
    throw new ConfigError(`${where}: the expression is of type ${type}; expected ${accepts.join(' or ')}`);
  return {
    where,
    source,
    type,
    evaluate: (vars) => {
      try {
        return { ok: true, value: program(vars as Record<string, unknown>) };
      } catch (err) {
        return { ok: false, error: describeCelError(source, err) };
      }
    },
  };
}

/** True when a JSON value holds a whole number anywhere (CEL needs it as an int). */
function holdsInt(v: unknown): boolean {
  if (typeof v === 'number') return Number.isInteger(v);
  if (Array.isArray(v)) {
    for (const x of v) if (holdsInt(x)) return true;
    return false;
  }
  if (v !== null && typeof v === 'object') {
    for (const k in v) if (holdsInt((v as Record<string, unknown>)[k])) return true;
  }
  return false;
}

function convert(v: unknown): unknown {
  if (typeof v === 'number') return Number.isInteger(v) ? BigInt(v) : v;
  if (Array.isArray(v)) return v.map(convert);
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = convert(x);
    return out;
  }
  return v;
}

/**
 * A JSON value as CEL sees a Kubernetes object: whole numbers become `int` (bigint),
 * as in Kubernetes' own CEL; everything else is kept. A value without whole numbers
 * (most metadata) is passed as it is, not copied; CEL only reads it.
 */
export function toCel(v: unknown): unknown {
  return holdsInt(v) ? convert(v) : v;
}

/** Text of an expression with its string literals blanked (for reading which fields it names). */
function withoutStrings(source: string): string {
  return source.replace(/(["'])(?:\\.|(?!\1)[^\\\n])*\1/g, '""');
}

/** True when every use of `object` in the expressions is `object.metadata...`: a metadata-only list is enough. */
export function readsOnlyMetadata(sources: readonly string[]): boolean {
  for (const s of sources) {
    const text = withoutStrings(s);
    for (const m of text.matchAll(/\bobject\b(?:\s*\.\s*\??\s*(\w+))?/g)) {
      // `x.object` is a field named object, not the variable
      if (/[\w.]/.test(text[(m.index ?? 0) - 1] ?? '')) continue;
      if (m[1] !== 'metadata') return false;
    }
  }
  return true;
}

/** The evidence names an expression reads (`evidence.NAME` or `evidence["NAME"]`). */
export function evidenceNames(source: string): string[] {
  const out = new Set<string>();
  for (const m of source.matchAll(/\bevidence\s*(?:\.\s*\??\s*(\w+)|\[\s*["'](\w+)["']\s*\])/g))
    out.add((m[1] ?? m[2])!);
  return [...out];
}

/** True when an expression reads the objects of an evidence index, not only its keys. */
export function readsEvidenceValues(source: string, name: string): boolean {
  const text = withoutStrings(source);
  return new RegExp(`\\bevidence\\s*\\.\\s*\\??\\s*${name}\\s*(\\[|\\.\\s*\\?)`).test(text);
}
