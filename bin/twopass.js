#!/usr/bin/env node
// The `twopass` executable: the compiled CLI when installed from a package (dist/),
// the TypeScript source in a checkout (Node >= 22.18 strips the types).
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/shared/cli.js', import.meta.url);
const source = new URL('../shared/cli.ts', import.meta.url);
const { cli } = await import((existsSync(compiled) ? compiled : source).href);
await cli();
