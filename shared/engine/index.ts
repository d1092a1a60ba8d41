export { decide, graceFor, guard, summarize } from './decide.ts';
export { diffSnapshots, type SnapshotDiff } from './diff.ts';
export { formatDuration, parseDuration } from './duration.ts';
export * from './types.ts';
