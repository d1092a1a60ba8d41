/**
 * Where a command writes besides its log (--report, --save-snapshot, --metrics-textfile):
 * checked before the run starts, so that a path that cannot be written is a configuration
 * error in one line (exit 2), never found out after a run has deleted.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ConfigError, fsWhy } from '../errors.ts';
import { ensureDir } from '../paths.ts';

/** A file the command will write: its directory exists and is writable, and it is not a directory. */
export function checkOutputFile(flag: string, path: string): void {
  const dir = dirname(resolve(path));
  try {
    if (!statSync(dir).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new ConfigError(`${flag} ${path}: cannot write into ${dir}: ${fsWhy(err)}`, { cause: err });
  }
  let isDir = false;
  try {
    isDir = statSync(path).isDirectory();
  } catch {
    // absent: it will be created
  }
  if (isDir) throw new ConfigError(`${flag} ${path}: is a directory; name a file`);
}

/** A directory the command will write files into: created now, and writable. */
export function prepareOutputDir(flag: string, dir: string): void {
  try {
    ensureDir(dir);
  } catch (err) {
    throw new ConfigError(`${flag} ${dir}: cannot write there: ${fsWhy(err)}`, { cause: err });
  }
}
