/** Runs the `twopass` command as a child process, the way a user does. */
import { spawnSync } from 'node:child_process';

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
