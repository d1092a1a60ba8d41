/**
 * The shortest grace (and kindGrace, minAge) a config may give without `allowShortGrace`:
 * two observations closer together than this prove little (a pod being set up, a list
 * that lags), so a zero or near-zero grace is a test setting, never a default.
 */
export const GRACE_FLOOR_MS = 60_000;

/** Durations like `15m`, `1h30m`, `90s`, `500ms`, `2d`. */
const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/gy;

export function parseDuration(text: string): number | undefined {
  const s = text.trim();
  if (s === '' || s === '0') return s === '0' ? 0 : undefined;
  PART.lastIndex = 0;
  let total = 0;
  let at = 0;
  for (;;) {
    const m = PART.exec(s);
    if (!m) break;
    total += Number(m[1]) * UNITS[m[2]!]!;
    at = PART.lastIndex;
  }
  return at === s.length && at > 0 && Number.isFinite(total) ? Math.round(total) : undefined;
}

export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  const sign = ms < 0 ? '-' : '';
  let rest = Math.abs(Math.round(ms));
  if (rest < 1000) return `${sign}${rest}ms`;
  const parts: string[] = [];
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
  }
  return sign + parts.join('');
}
