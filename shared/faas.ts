/**
 * The FaaS entry point: one `handler(event)` per registered function, built here from
 * the registry (functions are called; they do not run themselves). Point a runtime at
 * `handlers['danm-endpoints']`, or at `handler` with `{ function: NAME, ...event }`.
 */
import { FUNCTIONS } from '../functions/index.ts';
import { ConfigError } from './errors.ts';
import { type HandlerEvent, type HandlerResult, makeHandler } from './runtime/handler.ts';

export type { HandlerEvent, HandlerResult } from './runtime/handler.ts';

export const handlers: Readonly<Record<string, (event: HandlerEvent) => Promise<HandlerResult>>> =
  Object.fromEntries(FUNCTIONS.map((fn) => [fn.name, makeHandler(fn)]));

/** One handler for every function: the event names it in `function`. */
export async function handler(event: (HandlerEvent & { function?: unknown }) | null | undefined) {
  const { function: name, ...rest } = event ?? {};
  const h = typeof name === 'string' && Object.hasOwn(handlers, name) ? handlers[name] : undefined;
  if (!h)
    throw new ConfigError(
      `handler: \`function\` must name a function (${FUNCTIONS.map((f) => f.name).join(', ')}), got ${JSON.stringify(name)}`,
    );
  return h(rest);
}
