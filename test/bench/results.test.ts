/** RESULTS.md: a full `npm run bench` replaces the tables and keeps the hand-written sections. */
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { resultsFile } from './common.ts';

test('new tables replace the old; every hand-written ## section is kept verbatim', () => {
  const old = [
    '# Benchmark results',
    '',
    '### Engine (old table)',
    '| a | b |',
    '',
    '## Goals not met, and why',
    '- peak RSS: reasons',
    '',
    '## Profile',
    'flame',
    '',
    '## What changed',
    '- history',
    '',
  ].join('\n');
  const out = resultsFile(old, ['### Engine (new table)\n| c | d |\n']);
  assert.ok(out.includes('### Engine (new table)'));
  assert.not.ok(out.includes('old table'));
  assert.ok(out.endsWith(old.slice(old.indexOf('## Goals'))), out);
  // the shipped file: its hand-written sections survive a rewrite
  const shipped = readFileSync(new URL('./RESULTS.md', import.meta.url), 'utf8');
  const again = resultsFile(shipped, ['### x\n']);
  for (const h of shipped.match(/^## .*$/gm) ?? []) assert.ok(again.includes(h), `${h} is lost`);
  assert.ok((shipped.match(/^## .*$/gm) ?? []).length >= 3);
});

test('a first run starts the hand-written part with What changed', () => {
  assert.match(resultsFile(undefined, ['### t\n']), /### t\n\n## What changed\n$/);
});

test.run();
