/** A function's settings, parsed as the runtime parses them where the config loads. */
import type { AnyFunction } from '../../shared/contract/index.ts';
import type { ParsedSettings } from '../../shared/contract/settings.ts';
import { validateSettings } from '../../shared/runtime/settings.ts';

export const parsed = (fn: AnyFunction, raw: Readonly<Record<string, unknown>> = {}): ParsedSettings =>
  validateSettings(fn, raw, 'test');
