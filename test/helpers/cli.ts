/** Runs the `twopass` command as a child process, the way a user does. */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const CLI = new URL('../../bin/twopass.js', import.meta.url).pathname;

export function twopass(args: string[], env: Record<string, string> = {}, cwd?: string) {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    env: { ...process.env, TWOPASS_OUTPUT: '', ...env },
    ...(cwd ? { cwd } : {}),
    timeout: 120_000,
  });
  return {
    code: r.status,
    out: r.stdout,
    err: r.stderr,
    json: () =>
      r.stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

export type Spawned = { code: number | null; signal: string | null; out: string; err: string };

/** Runs the CLI as a child process; `onSpawn` gets the child (to kill it, or close its stdout). */
export function spawnCli(
  args: string[],
  onSpawn?: (c: ChildProcess) => void,
  env: Record<string, string> = {},
): Promise<Spawned> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, TWOPASS_OUTPUT: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (err += d.toString()));
    onSpawn?.(c);
    c.on('exit', (code, signal) => resolve({ code, signal, out, err }));
  });
}

/** `twopass` without blocking this process (needed when a fake server runs in it). */
export async function twopassAsync(
  args: string[],
  env: Record<string, string> = {},
): Promise<ReturnType<typeof twopass>> {
  const { code, out, err } = await spawnCli(args, undefined, env);
  return {
    code,
    out,
    err,
    json: () =>
      out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

/**
 * A working directory for CLI runs: `kubeconfig` and `config.yaml` written into `dir`, and the
 * arguments that name them (`--kubeconfig DIR/kubeconfig --config DIR/config.yaml`).
 */
export function cliFiles(dir: string, kubeconfig: string, config: string): string[] {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'kubeconfig'), kubeconfig);
  writeFileSync(join(dir, 'config.yaml'), config);
  return ['--kubeconfig', join(dir, 'kubeconfig'), '--config', join(dir, 'config.yaml')];
}
