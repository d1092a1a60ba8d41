/**
 * Breaks each rule of decide() in turn and checks that the engine tests catch it
 * (proof that the property tests can fail). Not part of `npm test`:
 *   node test/engine/mutate.ts
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const file = new URL('../../shared/engine/decide.ts', import.meta.url);
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
    const r = spawnSync('npx', ['uvu', 'test', '(decide|properties)\\.test\\.ts$'], { encoding: 'utf8' });
    const fails = (r.stdout.match(/FAIL/g) ?? []).length;
    if (r.status === 0) survived++;
    console.log(
      `${r.status === 0 ? 'SURVIVED' : 'killed  '}  ${name}${fails ? ` (${fails} failing tests)` : ''}`,
    );
  }
} finally {
  writeFileSync(file, original);
}
console.log(`${mutants.length - survived} of ${mutants.length} mutants killed`);
process.exitCode = survived === 0 ? 0 : 1;
