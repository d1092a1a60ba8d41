/**
 * FileStateStore and FileLock: the local default, `./.twopass/<function>.json`,
 * written atomically (temp file + rename), guarded by `<function>.lock`.
 */
import { randomUUID } from 'node:crypto';
import { open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { emptyState, type State } from '../engine/types.ts';
import { ConfigError, fsWhy } from '../errors.ts';
import { ensureDir } from '../paths.ts';
import { LockHeldError, resetCommand, StateConflictError, StateCorruptError } from './errors.ts';
import { FileHistory, type HistoryStore } from './history.ts';
import { parseState } from './schema.ts';
import type { Loaded, Lock, LockHandle, StateStore } from './store.ts';
import { FileTombstones, type TombstoneStore } from './tombstones.ts';

type Envelope = { revision: number; state: unknown };

export class FileStateStore implements StateStore {
  readonly dir: string;
  readonly description: string;
  readonly tombstones: TombstoneStore;
  readonly history: HistoryStore;
  constructor(dir: string, now: () => number = Date.now) {
    this.dir = dir;
    this.description = `file:${dir}`;
    this.tombstones = new FileTombstones(dir, now);
    this.history = new FileHistory(dir);
  }

  path(fn: string): string {
    return join(this.dir, `${fn}.json`);
  }

  private async read(fn: string): Promise<Envelope | undefined> {
    let text: string;
    try {
      text = await readFile(this.path(fn), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new StateCorruptError(`${this.path(fn)}: cannot read state: ${(err as Error).message}`, {
        cause: err,
      });
    }
    let env: Envelope;
    try {
      env = JSON.parse(text) as Envelope;
    } catch (err) {
      throw new StateCorruptError(
        `${this.path(fn)}: state is not valid JSON; nothing will be deleted until it is repaired or reset with \`${resetCommand(fn, this.description)}\``,
        { cause: err },
      );
    }
    if (!env || typeof env !== 'object' || typeof env.revision !== 'number') {
      throw new StateCorruptError(
        `${this.path(fn)}: state file has no revision; reset it with \`${resetCommand(fn, this.description)}\``,
      );
    }
    return env;
  }

  async load(fn: string): Promise<Loaded> {
    const env = await this.read(fn);
    if (!env) return { state: emptyState(fn) };
    return {
      state: parseState(env.state, fn, this.path(fn), this.description),
      version: String(env.revision),
    };
  }

  async save(fn: string, state: State, version: string | undefined): Promise<string> {
    await makeStateDir(this.dir);
    const current = await this.read(fn).catch((err) => {
      if (err instanceof StateCorruptError && version === undefined) return undefined;
      throw err;
    });
    const currentVersion = current ? String(current.revision) : undefined;
    if (currentVersion !== version) {
      throw new StateConflictError(
        `${this.path(fn)}: state changed since it was loaded (revision ${version ?? 'none'} -> ${currentVersion ?? 'none'})`,
      );
    }
    const revision = (current?.revision ?? 0) + 1;
    const tmp = `${this.path(fn)}.${process.pid}.${randomUUID().slice(0, 8)}.tmp`;
    await writeFile(tmp, `${JSON.stringify({ revision, state })}\n`, { mode: 0o600 });
    await rename(tmp, this.path(fn));
    return String(revision);
  }

  async reset(fn: string): Promise<boolean> {
    try {
      await rm(this.path(fn));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw err;
    }
  }
}

type LockInfo = { pid: number; host: string; token: string; acquiredAt: string };

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The state directory, created and writable; a path that cannot be one, or a directory this
 * process may not write, is a configuration error (exit 2), in one line: neither heals.
 */
export async function makeStateDir(dir: string): Promise<void> {
  try {
    ensureDir(dir);
  } catch (err) {
    throw new ConfigError(`--state file:${dir}: cannot use it as the state directory: ${fsWhy(err)}`, {
      cause: err,
    });
  }
}

/** An exclusive lock file; a lock left by a dead process on this host is taken over. */
export class FileLock implements Lock {
  readonly dir: string;
  readonly description: string;
  private readonly pid: number;
  private readonly now: () => number;
  constructor(dir: string, now: () => number, pid: number = process.pid) {
    this.dir = dir;
    this.now = now;
    this.pid = pid;
    this.description = `file:${dir}`;
  }

  async acquire(fn: string): Promise<LockHandle> {
    await makeStateDir(this.dir);
    const path = join(this.dir, `${fn}.lock`);
    const info: LockInfo = {
      pid: this.pid,
      host: hostname(),
      token: randomUUID(),
      acquiredAt: new Date(this.now()).toISOString(),
    };
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fh = await open(path, 'wx', 0o600);
        await fh.writeFile(JSON.stringify(info));
        await fh.close();
        const controller = new AbortController();
        return {
          lost: controller.signal,
          release: async () => {
            const now = await readFile(path, 'utf8').catch(() => '');
            if (now.includes(info.token)) await rm(path, { force: true });
          },
        };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        let holder: LockInfo | undefined;
        try {
          holder = JSON.parse(await readFile(path, 'utf8')) as LockInfo;
        } catch {
          holder = undefined; // half-written: treat as held by a live process
        }
        if (holder && holder.host === hostname() && !alive(holder.pid)) {
          await rm(path, { force: true }); // left by a killed run on this host
          continue;
        }
        throw new LockHeldError(
          `${fn}: another run holds ${path}${holder ? ` (pid ${holder.pid} on ${holder.host} since ${holder.acquiredAt})` : ''}`,
        );
      }
    }
    throw new LockHeldError(`${fn}: could not take over a stale lock at ${path}`);
  }
}
