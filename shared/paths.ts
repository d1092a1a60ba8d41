/** The package root (where package.json is), from the sources or from the compiled dist/. */
import { accessSync, constants, existsSync, mkdirSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'package.json')) && !dir.endsWith('dist')) return dir;
    dir = dirname(dir);
  }
  throw new Error('twopass: cannot find the package root (package.json)');
}

/**
 * Creates a directory and its missing parents one level at a time, and checks that the
 * process may write into it. Node's recursive mkdir can loop for ever on a path whose parent
 * cannot hold children (`/proc/x`): here each level is tried once, and any failure throws
 * the system's error (with its code) at once.
 */
export function ensureDir(dir: string): void {
  const full = resolve(dir);
  const missing: string[] = [];
  for (let at = full; ; at = dirname(at)) {
    let st: ReturnType<typeof statSync> | undefined;
    try {
      st = statSync(at);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (st) {
      if (!st.isDirectory()) throw Object.assign(new Error(`${at} is not a directory`), { code: 'ENOTDIR' });
      break;
    }
    missing.unshift(at);
    if (dirname(at) === at) break;
  }
  for (const d of missing)
    try {
      mkdirSync(d);
    } catch (err) {
      // the parent exists yet says its child does not: a file system that holds no new directories (/proc)
      if ((err as NodeJS.ErrnoException).code === 'ENOENT')
        throw Object.assign(new Error(`${dirname(d)} cannot hold a new directory`), { code: 'ENOCHILD' });
      throw err;
    }
  accessSync(full, constants.W_OK);
}

/** Writes (or appends) `data` and fsyncs before returning: durable once it resolves. */
export async function writeSynced(path: string, data: Buffer, append = false): Promise<void> {
  const f = await open(path, append ? 'a' : 'w');
  try {
    await f.writeFile(data);
    await f.sync();
  } finally {
    await f.close();
  }
}
