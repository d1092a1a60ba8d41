/** The package root (where package.json is), from the sources or from the compiled dist/. */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'package.json')) && !dir.endsWith('dist')) return dir;
    dir = dirname(dir);
  }
  throw new Error('twopass: cannot find the package root (package.json)');
}
