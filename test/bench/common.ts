/** Shared bits of the benchmarks: machine line, child-process measurement, markdown tables. */
import { spawn, spawnSync } from 'node:child_process';
import { cpus, totalmem } from 'node:os';

export function machine(): string {
  const c = cpus();
  return `${c.length} cores (${c[0]?.model.trim() ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}`;
}

/** Runs one measurement in a fresh process (clean peak RSS); it prints one JSON line last. */
export function measure(file: string, args: string[]): Record<string, number | string> {
  const r = spawnSync(process.execPath, ['--expose-gc', new URL(file, import.meta.url).pathname, ...args], {
    encoding: 'utf8',
    maxBuffer: 64 * 2 ** 20,
    timeout: 30 * 60_000,
  });
  const line = r.stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as Record<string, number | string>;
  } catch {
    throw new Error(`${file} ${args.join(' ')} failed (exit ${r.status}): ${r.stderr.slice(-2000)}`);
  }
}

export function peakRssMiB(): number {
  return Math.round(process.resourceUsage().maxRSS / 1024);
}

export function mdTable(title: string, head: string[], rows: (string | number)[][], note?: string): string {
  const lines = [
    `### ${title}`,
    '',
    `Machine: ${machine()}`,
    '',
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ];
  if (note) lines.push('', note);
  return `${lines.join('\n')}\n`;
}

export function arg(name: string, def?: string): string {
  const i = process.argv.indexOf(`--${name}`);
  if (i >= 0 && process.argv[i + 1] !== undefined) return process.argv[i + 1]!;
  if (def === undefined) throw new Error(`--${name} is required`);
  return def;
}

export const ms = (n: number) => `${n.toFixed(n < 10 ? 2 : 0)} ms`;

export const min = (xs: readonly number[]) => Math.min(...xs);
export const max = (xs: readonly number[]) => Math.max(...xs);
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Runs `each(0..n-1)` on `workers` concurrent workers (seeding a real apiserver). */
export async function inParallel(
  n: number,
  workers: number,
  each: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      for (let i = next++; i < n; i = next++) await each(i);
    }),
  );
}

/** Runs a process to its end: exit code, stdout and stderr. */
export function runProcess(
  cmd: string,
  args: string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d: Buffer) => (stdout += d));
    c.stderr.on('data', (d: Buffer) => (stderr += d));
    c.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * RESULTS.md after a full run: the new tables (`###` sections) replace the old ones; the
 * hand-written `##` sections that follow them (goals not met, profiles, what changed) are
 * kept as they were.
 */
export function resultsFile(previous: string | undefined, sections: readonly string[]): string {
  const at = previous === undefined ? -1 : previous.search(/^## /m);
  const handWritten = at >= 0 ? previous!.slice(at) : '## What changed\n';
  return `# Benchmark results\n\nWritten by \`npm run bench\`; the latest run replaces the tables.\n\n${sections.join('\n')}\n${handWritten}`;
}
