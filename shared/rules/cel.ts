/**
 * CEL for rules: one environment, expressions compiled (parsed and type-checked) when
 * a rule loads, errors that name the rule, the field and the position. Kubernetes
 * objects are handed to CEL as Kubernetes' own CEL sees them: whole numbers are `int`.
 * Evaluation never throws past `evaluate`: an error is a value the caller turns into
 * "indeterminate" (unknown is not unused).
 */
import { Environment } from '@marcbachmann/cel-js';
import { RE2JS } from 're2js';
import { ConfigError } from '../errors.ts';

/** The variables an expression of a field may read. */
export type Scope = 'object' | 'object+evidence';

/**
 * `matches` runs on RE2 (linear in the input, as CEL specifies and Kubernetes does), never
 * on the backtracking RegExp of JavaScript, where `^(a+)+$` against a crafted object name
 * takes minutes. The library's own `matches` cannot be replaced, so an expression's
 * `matches` calls are renamed, in place and with a name of the same length (positions in
 * errors stay right), to this function before it is compiled.
 */
const RE2_MATCHES = 're2mtch';
const PATTERNS = new Map<string, RE2JS>();

/** An RE2 pattern, compiled once (a bounded cache: patterns built at run time come and go). */
function re2(pattern: string): RE2JS {
  let re = PATTERNS.get(pattern);
  if (!re) {
    re = RE2JS.compile(pattern);
    if (PATTERNS.size >= 512) PATTERNS.clear();
    PATTERNS.set(pattern, re);
  }
  return re;
}

function environment(scope: Scope): Environment {
  const env = new Environment({ enableOptionalTypes: true }).registerVariable('object', 'map');
  if (scope === 'object+evidence') env.registerVariable('evidence', 'map');
  env.registerFunction(`string.${RE2_MATCHES}(string): bool`, (s: string, pattern: string) => {
    try {
      return re2(pattern).test(s);
    } catch (err) {
      throw new Error(`invalid regular expression \`${pattern}\` (RE2 syntax): ${(err as Error).message}`);
    }
  });
  return env;
}

const ENVS: Record<Scope, Environment> = {
  object: environment('object'),
  'object+evidence': environment('object+evidence'),
};

/** A node of the library's syntax tree (the parts read here). */
type Node = Readonly<{ op: string; args: unknown; start?: number; end?: number; pos?: number }>;
const isNode = (v: unknown): v is Node =>
  v !== null && typeof v === 'object' && typeof (v as { op?: unknown }).op === 'string';

/** The macros that run their body once per element of a list or key of a map. */
const COMPREHENSIONS = new Set(['all', 'exists', 'exists_one', 'map', 'filter']);

/**
 * The cost model of an expression, in evaluation steps: each node is one; a comprehension
 * runs its body once per element of its range; `matches` is linear in its input. At load
 * time lists and strings are assumed at their usual bounds; at run time the object's own
 * largest list and longest string are used, before the expression is evaluated.
 */
export const COST_LIMIT = 1_000_000;
export const RUNTIME_COST_LIMIT = 10_000_000;
const ASSUMED = { list: 1000, string: 256 } as const;

type Sizes = Readonly<{ list: number; string: number }>;
type Shape = Readonly<{ cost: (s: Sizes) => number }>;

/** The cost of a node as a function of the sizes of lists and strings. */
function shape(node: unknown): Shape {
  if (Array.isArray(node)) {
    const parts = node.map(shape);
    return { cost: (s) => parts.reduce((n, p) => n + p.cost(s), 0) };
  }
  if (!isNode(node)) return { cost: () => 0 };
  const args = Array.isArray(node.args) ? node.args : [node.args];
  if (node.op === 'rcall' && COMPREHENSIONS.has(String(args[0]))) {
    const range = shape(args[1]);
    const body = shape(args[2]);
    return { cost: (s) => 1 + range.cost(s) + s.list * (1 + body.cost(s)) };
  }
  const parts = args.map(shape);
  const regex = node.op === 'rcall' && args[0] === 'matches';
  return { cost: (s) => 1 + (regex ? s.string : 0) + parts.reduce((n, p) => n + p.cost(s), 0) };
}

/** Where an expression iterates a whole evidence index (every target would scan every evidence object). */
function evidenceScans(node: unknown, out: Node[] = []): Node[] {
  if (Array.isArray(node)) for (const n of node) evidenceScans(n, out);
  else if (isNode(node)) {
    const args = Array.isArray(node.args) ? node.args : [node.args];
    if (node.op === 'rcall' && COMPREHENSIONS.has(String(args[0]))) {
      const range = args[1];
      const whole =
        isNode(range) &&
        ((range.op === 'id' && range.args === 'evidence') ||
          ((range.op === '.' || range.op === '?.') &&
            Array.isArray(range.args) &&
            isNode(range.args[0]) &&
            range.args[0].op === 'id' &&
            range.args[0].args === 'evidence'));
      if (whole) out.push(node);
    }
    for (const a of args) evidenceScans(a, out);
  }
  return out;
}

/** The variables (`object`, `evidence`) an expression reads. */
function variablesOf(node: unknown, out = new Set<string>()): Set<string> {
  if (Array.isArray(node)) for (const n of node) variablesOf(n, out);
  else if (isNode(node)) {
    if (node.op === 'id' && (node.args === 'object' || node.args === 'evidence')) out.add(node.args);
    else if (Array.isArray(node.args)) variablesOf(node.args, out);
    else if (isNode(node.args)) variablesOf(node.args, out);
  }
  return out;
}

/**
 * Where the name of a call `receiver . matches (` begins, read token by token from the end of
 * its receiver: only blanks, `//` comments and the dot may stand between them, and a comment
 * (which may say "matches" too) is skipped, never taken for the name.
 */
function nameAfter(source: string, from: number, name: string): number | undefined {
  let i = from;
  let dot = false;
  for (;;) {
    while (i < source.length && /\s/.test(source[i]!)) i++;
    if (source.startsWith('//', i)) {
      const nl = source.indexOf('\n', i);
      i = nl < 0 ? source.length : nl + 1;
      continue;
    }
    if (!dot && source[i] === '.') {
      dot = true;
      i++;
      continue;
    }
    return dot && source.startsWith(name, i) && !/[\w]/.test(source[i + name.length] ?? '') ? i : undefined;
  }
}

/** The offsets of the `matches` names of an expression's calls (to rename them to the RE2 function). */
function matchesCalls(source: string, node: unknown, out: number[] = []): number[] {
  if (Array.isArray(node)) for (const n of node) matchesCalls(source, n, out);
  else if (isNode(node)) {
    const args = Array.isArray(node.args) ? node.args : [node.args];
    if (node.op === 'rcall' && args[0] === 'matches' && isNode(args[1])) {
      const at = nameAfter(source, args[1].end ?? 0, 'matches');
      if (at !== undefined) out.push(at);
    }
    for (const a of args) matchesCalls(source, a, out);
  }
  return out;
}

/** True when any call of the library's own (backtracking) `matches` is left in the tree. */
function hasBacktrackingMatches(node: unknown): boolean {
  if (Array.isArray(node)) return node.some(hasBacktrackingMatches);
  if (!isNode(node)) return false;
  const args = Array.isArray(node.args) ? node.args : [node.args];
  if ((node.op === 'rcall' || node.op === 'call') && args[0] === 'matches') return true;
  return args.some(hasBacktrackingMatches);
}

/** The literal patterns of an expression's `matches` calls, each with its offset. */
function literalPatterns(node: unknown, out: { pattern: string; at: number }[] = []) {
  if (Array.isArray(node)) for (const n of node) literalPatterns(n, out);
  else if (isNode(node)) {
    const args = Array.isArray(node.args) ? node.args : [node.args];
    if (node.op === 'rcall' && args[0] === 'matches' && Array.isArray(args[2])) {
      const p = args[2][0];
      if (isNode(p) && p.op === 'value' && typeof p.args === 'string')
        out.push({ pattern: p.args, at: p.start ?? p.pos ?? 0 });
    }
    for (const a of args) literalPatterns(a, out);
  }
  return out;
}

const SIZES = new WeakMap<object, Sizes>();

/** `sizesOf` of the object an expression is evaluated on, once per object (a rule has several expressions). */
function sizesOfObject(v: unknown): Sizes {
  if (v === null || typeof v !== 'object') return sizesOf(v);
  let s = SIZES.get(v);
  if (!s) {
    s = sizesOf(v);
    SIZES.set(v, s);
  }
  return s;
}

/** The largest list and the longest string of a value (the run-time sizes of the cost model). */
export function sizesOf(v: unknown, into: { list: number; string: number } = { list: 1, string: 1 }) {
  if (typeof v === 'string') into.string = Math.max(into.string, v.length);
  else if (Array.isArray(v)) {
    into.list = Math.max(into.list, v.length);
    for (const x of v) sizesOf(x, into);
  } else if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v);
    into.list = Math.max(into.list, keys.length);
    for (const k of keys) {
      into.string = Math.max(into.string, k.length);
      sizesOf((v as Record<string, unknown>)[k], into);
    }
  }
  return into;
}

export type Compiled = Readonly<{
  /** Where the expression sits: `rule NAME: FIELD`. */
  where: string;
  source: string;
  /** The type the checker inferred (`bool`, `string`, `dyn`...). */
  type: string;
  /** The estimated cost of one evaluation, at the usual bounds of lists and strings. */
  cost: number;
  /** Iterates a whole evidence index: every target scans every evidence object. */
  scansEvidence: boolean;
  /** The variables the expression reads (none: a constant). */
  reads: ReadonlySet<string>;
  /** Evaluates; an object whose sizes make the expression cost more than the limit is an error, not evaluated. */
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
  const first = String(e.message ?? err)
    .split('\n')[0]!
    .replaceAll(RE2_MATCHES, 'matches');
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
  let model: Shape;
  let scans: Node[];
  let reads: Set<string>;
  try {
    const ast = (env.parse(source) as unknown as { ast: unknown }).ast;
    for (const { pattern, at } of literalPatterns(ast)) {
      try {
        re2(pattern);
      } catch (err) {
        throw Object.assign(
          new Error(`invalid regular expression (RE2 syntax, linear time): ${(err as Error).message}`),
          { node: { pos: at } },
        );
      }
    }
    model = shape(ast);
    scans = evidenceScans(ast);
    reads = variablesOf(ast);
    // `matches` → the RE2 function, same length, same positions.
    let text = source;
    for (const at of matchesCalls(source, ast))
      text = `${text.slice(0, at)}${RE2_MATCHES}${text.slice(at + RE2_MATCHES.length)}`;
    program = env.parse(text) as (vars: Record<string, unknown>) => unknown;
    // The backtracking `matches` must be unreachable: a call the renaming missed is refused.
    if (hasBacktrackingMatches((program as unknown as { ast: unknown }).ast))
      throw new Error(
        '`matches` could not be bound to the linear-time engine here: write it as `STRING.matches(PATTERN)`',
      );
    const checked = env.check(text);
    if (!checked.valid) throw checked.error;
    type = String(checked.type);
  } catch (err) {
    throw new ConfigError(`${where}: ${describeCelError(source, err)}`);
  }
  if (type !== 'dyn' && !accepts.some((a) => type === a || type.startsWith(`${a}<`)))
    throw new ConfigError(`${where}: the expression is of type ${type}; expected ${accepts.join(' or ')}`);
  const cost = model.cost(ASSUMED);
  if (cost > COST_LIMIT)
    throw new ConfigError(
      `${where}: the expression costs about ${cost.toLocaleString('en')} steps an object (lists of ${ASSUMED.list}, strings of ${ASSUMED.string}), above the limit of ${COST_LIMIT.toLocaleString('en')}: nest fewer comprehensions`,
    );
  return {
    where,
    source,
    type,
    cost,
    scansEvidence: scans.length > 0,
    reads,
    evaluate: (vars) => {
      const sizes = sizesOfObject(vars.object);
      const at = model.cost(sizes);
      if (at > RUNTIME_COST_LIMIT)
        return {
          ok: false,
          error: `not evaluated: on this object (a list of ${sizes.list}, a string of ${sizes.string}) the expression would cost about ${at.toLocaleString('en')} steps, above the limit of ${RUNTIME_COST_LIMIT.toLocaleString('en')}`,
        };
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
