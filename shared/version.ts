/** The twopass version, from package.json. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from './paths.ts';

export const VERSION = (
  JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }
).version;
