/**
 * Breaks each rule of decide() in turn and checks that the engine tests catch it
 * (proof that the property tests can fail). It mutates a copy of the engine and its
 * tests in a temporary directory, never the working tree. Not part of `npm test`:
 *   node test/engine/mutate.ts
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('../..', import.meta.url).pathname;
const copy = mkdtempSync(join(tmpdir(), 'twopass-mutate-'));
for (const dir of ['shared/engine', 'test/engine', 'test/helpers'])
  cpSync(join(root, dir), join(copy, dir), { recursive: true });
cpSync(join(root, 'package.json'), join(copy, 'package.json'));
symlinkSync(join(root, 'node_modules'), join(copy, 'node_modules'));
const file = join(copy, 'shared/engine/decide.ts');
const original = readFileSync(file, 'utf8');
const mutants: [string, string, string][] = [
  ['one observation confirms', 'if (graceLeft <= 0 && ageLeft <= 0) {', 'if (true) {'],
  ['incomplete snapshots decide', 'if (!isComplete(snapshot)) return abort', 'if (false) return abort'],
  ['grace ignored', 'if (graceLeft <= 0 && ageLeft <= 0) {', 'if (ageLeft <= 0 || graceLeft <= 0) {'],
  ['fingerprint ignored', 'prev.fingerprint !== t.fingerprint || ', ''],
  ['keep-mark ignored', 'if (t.keep) {', 'if (t.keep && false) {'],
  ['use ignored', 'if (used.has(t.key)) {', 'if (false) {'],
  ['indeterminate ignored', 'if (why !== undefined) {', 'if (false) {'],
  [
    'evidence guard off',
    'const drops = evidenceDrops(previous.lastSnapshot, lastSnapshot, policy);',
    'const drops: Drop[] = [];',
  ],
  ['deletion guard off', 'if (deletionRefusal !== undefined) reasons.push(deletionRefusal);', ''],
  ['evidence accepted at once', 'pending.snapshots >= 2 && heldMs >= after', 'true'],
  [
    'input mutated',
    'const used = new Set(snapshot.used);',
    'const used = new Set((snapshot.used as string[]).sort());',
  ],
  ['never confirms', 'summary.confirmed++;', 'summary.confirmed++; continue;'],
  [
    'clock going back ignored',
    'const backwards = prev !== undefined && (clockWentBack || now < prev.lastUnusedAt);',
    'const backwards = false;',
  ],
];
let survived = 0;
try {
  for (const [name, from, to] of mutants) {
    if (!original.includes(from)) {
      console.log(`NOT APPLIED  ${name}`);
      survived++;
      continue;
    }
    writeFileSync(file, original.replace(from, to));
    const r = spawnSync(join(root, 'node_modules/.bin/uvu'), ['test', '(decide|properties)\\.test\\.ts$'], {
      cwd: copy,
      encoding: 'utf8',
    });
    const fails = (r.stdout.match(/FAIL/g) ?? []).length;
    if (r.status === 0) survived++;
    console.log(
      `${r.status === 0 ? 'SURVIVED' : 'killed  '}  ${name}${fails ? ` (${fails} failing tests)` : ''}`,
    );
  }
} finally {
  rmSync(copy, { recursive: true, force: true });
}
console.log(`${mutants.length - survived} of ${mutants.length} mutants killed`);
process.exitCode = survived === 0 ? 0 : 1;
