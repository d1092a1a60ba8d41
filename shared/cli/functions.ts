/** `twopass functions`: each function, its defaults, and its settings from its own schema. */

import { functionsOf } from '../catalogue.ts';
import { type Config, describePolicy, functionConfig } from '../config.ts';
import { describeSettings } from '../contract/index.ts';
import type { OutputMode } from '../log/logger.ts';
import { EXIT } from '../runtime/errors.ts';
import type { Io } from './io.ts';

export function functionsCommand(cfg: Config, output: OutputMode, io: Io): number {
  for (const fn of functionsOf(cfg)) {
    const fc = functionConfig(cfg, fn.name, fn.defaults);
    const settings = describeSettings(fn.settingsSchema).map((s) => ({
      ...s,
      ...(fc.settings[s.key] !== undefined ? { set: fc.settings[s.key] } : {}),
    }));
    if (output === 'json') {
      const { name, description } = fn;
      const { enabled, schedule, apply, record, policy } = fc;
      const kinds = Object.keys(fn.kindReport);
      io.out.write(
        `${JSON.stringify({ name, description, enabled, schedule, apply, record, kinds, policy, settings })}\n`,
      );
      continue;
    }
    io.out.write(
      `${fn.name}${fc.enabled ? '' : ' (disabled)'}\n  ${fn.description}\n  kinds: ${Object.keys(fn.kindReport).join(', ')}\n  schedule ${fc.schedule}, ${fc.apply ? 'apply' : 'dry run'}\n  ${describePolicy(fc.policy)}\n`,
    );
    if (settings.length > 0) io.out.write(`  settings (functions.${fn.name}.settings):\n`);
    for (const s of settings)
      io.out.write(
        `    ${s.key}: ${s.type}${s.default !== undefined ? ` (default ${JSON.stringify(s.default)})` : ''}${s.description ? `: ${s.description}` : ''}${s.set !== undefined ? ` [set: ${JSON.stringify(s.set)}]` : ''}\n`,
      );
  }
  return EXIT.ok;
}
