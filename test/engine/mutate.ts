/**
 * Breaks each rule of decide() in turn and checks that the engine tests catch it
 * (proof that the property tests can fail). It mutates a copy of the engine and its
 * tests in a temporary directory, never the working tree. `npm test` runs it
 * (test/engine/mutation.test.ts: every mutant applies and is killed, and the unmutated copy
 * passes); by hand:
 *   node test/engine/mutate.ts
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('../..', import.meta.url).pathname;

/** [name, the text of decide.ts it replaces, what it puts there]: each breaks one rule. */
export const MUTANTS: readonly (readonly [string, string, string])[] = [
  ['one observation confirms', 'if (graceLeft <= 0 && ageLeft <= 0) {', 'if (true) {'],
  ['incomplete snapshots decide', 'if (!isComplete(snapshot)) return abort', 'if (false) return abort'],
  ['grace ignored', 'if (graceLeft <= 0 && ageLeft <= 0) {', 'if (ageLeft <= 0 || graceLeft <= 0) {'],
  ['fingerprint ignored', 'prev.fingerprint !== t.fingerprint || ', ''],
  [
    'note not stored at the first observation',
    'observations: 1,\n    ...(t.note !== undefined ? { note: t.note } : {}),',
    'observations: 1,',
  ],
  [
    'note not renewed',
    'observations: prev.observations + 1,\n    ...(t.note !== undefined ? { note: t.note } : {}),',
    'observations: prev.observations + 1,',
  ],
  ['keep-mark ignored', 'if (t.keep) {', 'if (t.keep && false) {'],
  ['use ignored', 'if (used.has(t.key)) {', 'if (false) {'],
  ['indeterminate ignored', 'if (why !== undefined) {', 'if (false) {'],
  [
    'evidence guard off',
    'const drops = evidenceDrops(previous.lastSnapshot, lastSnapshot, policy);',
    'const drops: Drop[] = [];',
  ],
  [
    'deletion guard off',
    'const deletionRefusal = deletionGuards(confirmed.length, summary.targets, policy);',
    'const deletionRefusal: [RefusalGuard, string][] = [];',
  ],
  [
    'counted targets left out of the total',
    'const summary = { ...EMPTY_SUMMARY, targets: targetCount(snapshot) };',
    'const summary = { ...EMPTY_SUMMARY, targets: snapshot.targets.length };',
  ],
  [
    'counted targets not in use',
    'if (blocker === undefined) summary.used += snapshot.counted ?? 0;',
    'if (blocker === undefined) summary.used += 0;',
  ],
  ['percentage guard off', 'if (confirmed > floor && percent > policy.maxDeletionPercent)', 'if (false)'],
  ['evidence accepted at once', 'pending.snapshots >= 2 && heldMs >= after', 'true'],
  [
    'used keys not matched to the held targets',
    'for (const k of snapshot.used) if (held.has(k)) used.add(k);',
    'for (const k of snapshot.used) used.add(k.slice(0, -1));',
  ],
  [
    'input mutated',
    'if (snapshot.targets.length >= snapshot.used.length) return new Set(snapshot.used);',
    'if (snapshot.targets.length >= snapshot.used.length) return new Set((snapshot.used as string[]).sort());',
  ],
  ['never confirms', 'summary.confirmed++;', 'summary.confirmed++; continue;'],
  [
    'clock going back ignored',
    'const backwards = prev !== undefined && (clockWentBack || now < prev.lastUnusedAt);',
    'const backwards = false;',
  ],
];

export type MutantRun = Readonly<{ applied: boolean; killed: boolean; failing: number; output: string }>;

/** A copy of the engine and its tests to mutate; `run` applies one mutant (or none) and runs the tests. */
export function mutationCopy(): {
  run: (mutant?: readonly [string, string, string]) => MutantRun;
  remove: () => void;
} {
  const copy = mkdtempSync(join(tmpdir(), 'twopass-mutate-'));
  for (const dir of ['shared', 'functions', 'test/engine', 'test/helpers'])
    cpSync(join(root, dir), join(copy, dir), { recursive: true });
  cpSync(join(root, 'package.json'), join(copy, 'package.json'));
  symlinkSync(join(root, 'node_modules'), join(copy, 'node_modules'));
  const file = join(copy, 'shared/engine/decide.ts');
  const original = readFileSync(file, 'utf8');
  return {
    run(mutant) {
      if (mutant && !original.includes(mutant[1]))
        return { applied: false, killed: false, failing: 0, output: '' };
      writeFileSync(file, mutant ? original.replace(mutant[1], mutant[2]) : original);
      const r = spawnSync(
        process.execPath,
        [join(root, 'node_modules/uvu/bin.js'), 'test', '(decide|properties)\\.test\\.ts$'],
        { cwd: copy, encoding: 'utf8' },
      );
      const output = `${r.stdout}${r.stderr}`;
      const failing = (r.stdout.match(/FAIL/g) ?? []).length;
      return { applied: true, killed: r.status !== 0, failing, output };
    },
    remove: () => rmSync(copy, { recursive: true, force: true }),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const copy = mutationCopy();
  let survived = 0;
  try {
    for (const m of MUTANTS) {
      const r = copy.run(m);
      if (!r.applied || !r.killed) survived++;
      console.log(
        `${!r.applied ? 'NOT APPLIED' : r.killed ? 'killed     ' : 'SURVIVED   '}  ${m[0]}${r.failing ? ` (${r.failing} failing tests)` : ''}`,
      );
    }
  } finally {
    copy.remove();
  }
  console.log(`${MUTANTS.length - survived} of ${MUTANTS.length} mutants killed`);
  process.exitCode = survived === 0 ? 0 : 1;
}
