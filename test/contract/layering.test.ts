/**
 * The layering of the project, read from the import statements of every source file:
 * functions are called, they do not run themselves; the engine stands alone; adapters
 * know nothing of the runtime; a function built on the contract needs no cast.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

const root = resolve(new URL('../..', import.meta.url).pathname);

function files(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(root, dir))) {
    const p = join(dir, e);
    if (statSync(join(root, p)).isDirectory()) out.push(...files(p));
    else if (p.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** Every module a file imports: project files as root-relative paths, packages by name. */
export function importsOf(file: string): string[] {
  const src = readFileSync(join(root, file), 'utf8');
  const out: string[] = [];
  for (const m of src.matchAll(
    /(?:^|\n)\s*(?:import|export)[^'"]*?from\s+'([^']+)'|import\(\s*'([^']+)'\s*\)/g,
  )) {
    const spec = (m[1] ?? m[2])!;
    out.push(spec.startsWith('.') ? relative(root, resolve(root, dirname(file), spec)) : spec);
  }
  return out;
}

const inside = (p: string, ...dirs: string[]) => dirs.some((d) => p === d || p.startsWith(`${d}/`));
const isPackage = (p: string) =>
  !p.includes('/') || p.startsWith('@') || p.startsWith('node:') || p.startsWith('uvu');

function violations(scope: string[], allowed: (imported: string, file: string) => boolean): string[] {
  const out: string[] = [];
  for (const f of scope) for (const i of importsOf(f)) if (!allowed(i, f)) out.push(`${f} imports ${i}`);
  return out;
}

const ADAPTERS = ['shared/kube', 'shared/openstack', 'shared/net', 'shared/http'];
const BASE = ['shared/errors.ts', 'shared/time.ts'];

const test = suite('layering');

test('the import reader sees static, re-exported and dynamic imports', () => {
  const cli = importsOf('shared/cli.ts');
  assert.ok(cli.includes('shared/config.ts'), 'a static import');
  assert.ok(cli.includes('shared/cli/run.ts'), 'a dynamic import');
  assert.ok(importsOf('shared/contract/index.ts').includes('shared/errors.ts'), 'a re-export');
});

test('functions/ imports only the contract, the engine types, the adapters and its own folder', () => {
  const bad = violations(
    files('functions').filter((f) => f !== 'functions/index.ts'),
    (i, f) =>
      i === 'zod' ||
      inside(i, 'shared/contract', ...ADAPTERS) ||
      i === 'shared/engine/types.ts' ||
      inside(i, f.split('/').slice(0, 2).join('/')),
  );
  assert.equal(bad, []);
});

test('the registry imports only the contract and the functions', () => {
  assert.equal(
    violations(['functions/index.ts'], (i) => inside(i, 'functions', 'shared/contract')),
    [],
  );
});

test('a rule is one more function on the contract: shared/rules builds on the contract and the adapters, never on the run loop', () => {
  const scope = files('shared/rules').filter((f) => f !== 'shared/rules/registry.ts');
  const bad = violations(
    scope,
    (i) =>
      isPackage(i) ||
      inside(i, 'shared/rules', 'shared/contract', 'shared/deploy', ...ADAPTERS, ...BASE) ||
      i === 'shared/engine/duration.ts' ||
      i === 'shared/state/configmap.ts',
  );
  assert.equal(bad, []);
  assert.ok(
    importsOf('shared/rules/function.ts').includes('shared/contract/index.ts'),
    'rule functions are built by defineFunction',
  );
});

test("shared/deploy builds a function's manifests from its declaration: the contract's access and the state's names, nothing of the run", () => {
  const scope = files('shared/deploy');
  assert.ok(scope.length > 0);
  assert.equal(
    violations(
      scope,
      (i) => isPackage(i) || i === 'shared/contract/access.ts' || i === 'shared/state/configmap.ts',
    ),
    [],
  );
});

/** The cycles of an import graph (Tarjan's strongly connected components of more than one file). */
function cycles(edges: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const c: string[] = [];
    for (let w = stack.pop(); w !== undefined; w = w === v ? undefined : stack.pop()) {
      onStack.delete(w);
      c.push(w);
    }
    if (c.length > 1) out.push(c.sort());
  };
  for (const f of edges.keys()) if (!index.has(f)) visit(f);
  return out;
}

test('no import cycles in the product: each type lives below what uses it', () => {
  const product = new Set([...files('shared'), ...files('functions')]);
  const edges = new Map([...product].map((f) => [f, importsOf(f).filter((i) => product.has(i))]));
  assert.equal(cycles(edges), []);
  // the detector sees one when there is one
  const made = new Map([
    ['a', ['b']],
    ['b', ['c']],
    ['c', ['a']],
    ['d', ['a']],
  ]);
  assert.equal(cycles(made), [['a', 'b', 'c']]);
});

test("the library below the entry points never imports the built-in functions' catalogue, and metrics and notifications never the runtime", () => {
  const entry = (f: string) =>
    f === 'shared/cli.ts' || f === 'shared/faas.ts' || f === 'shared/catalogue.ts' || inside(f, 'shared/cli');
  const library = files('shared').filter((f) => !entry(f));
  assert.equal(
    violations(library, (i) => i !== 'functions/index.ts'),
    [],
  );
  assert.equal(
    violations([...files('shared/metrics'), ...files('shared/notify')], (i) => !inside(i, 'shared/runtime')),
    [],
  );
});

test('the engine imports nothing of the project but itself', () => {
  assert.equal(
    violations(files('shared/engine'), (i) => inside(i, 'shared/engine')),
    [],
  );
});

test('adapters and the contract know nothing of the runtime, the entry points or the functions', () => {
  const scope = [...ADAPTERS.flatMap(files), ...files('shared/contract'), ...BASE];
  const bad = violations(
    scope,
    (i) => isPackage(i) || inside(i, ...ADAPTERS, 'shared/contract', 'shared/engine', ...BASE),
  );
  assert.equal(bad, []);
});

test('a function built on the contract needs no cast and no code outside its folder', () => {
  const folder = 'test/functions/mem-things';
  const own = files(folder);
  assert.ok(own.length > 0);
  assert.equal(
    violations(own, (i) => i === 'zod' || inside(i, 'shared/contract', folder)),
    [],
  );
  for (const f of own) assert.not.match(readFileSync(join(root, f), 'utf8'), /\bas\s+(?!const\b)[A-Z{(]/, f);
});

test('no function reads its target data through a cast', () => {
  for (const f of files('functions'))
    assert.not.match(readFileSync(join(root, f), 'utf8'), /\.data\s+as\b/, `${f} casts target data`);
});

test('product code reads nothing under test/ at run time, and the image copies nothing from it', () => {
  const product = [...files('shared'), ...files('functions'), 'bin/twopass.js'];
  const bad: string[] = [];
  for (const f of product) {
    const src = readFileSync(join(root, f), 'utf8');
    for (const m of src.matchAll(/(?:\.\.\/)+test\/|['"]test['"]\s*,\s*['"]fixtures['"]|\btest\/fixtures\b/g))
      bad.push(`${f}: ${m[0]}`);
  }
  assert.equal(bad, []);
  const dockerfile = readFileSync(join(root, 'infra/Dockerfile'), 'utf8');
  assert.not.match(dockerfile, /^COPY\s+test\//m);
});

test.run();
