/** The "complete function" of docs/design.md typechecks against the contract as it is today. */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const ROOT = new URL('../../', import.meta.url).pathname;

test("docs/design.md's complete function typechecks (the block as written, with the project's compiler options)", () => {
  const doc = readFileSync(join(ROOT, 'docs/design.md'), 'utf8');
  const at = doc.indexOf('A complete function');
  assert.ok(at >= 0, 'the example is in docs/design.md');
  const block = /```ts\n([\s\S]*?)```/.exec(doc.slice(at))?.[1];
  assert.ok(block?.includes('defineFunction'), 'the block defines a function');
  // written below test/docs/ (its imports moved two levels up to match), checked with the project's options
  const dir = join(ROOT, 'test', 'docs', '.example', 'fn');
  mkdirSync(dir, { recursive: true });
  try {
    writeFileSync(join(dir, 'index.ts'), block!.replaceAll("'../../shared/", "'../../../../shared/"));
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ extends: '../../../../tsconfig.json', include: ['index.ts'] }),
    );
    const tsc = spawnSync(
      process.execPath,
      [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(dir, 'tsconfig.json')],
      {
        encoding: 'utf8',
      },
    );
    assert.is(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
  } finally {
    rmSync(join(ROOT, 'test', 'docs', '.example'), { recursive: true, force: true });
  }
});

test.run();
