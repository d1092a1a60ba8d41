/** The faults every fault matrix injects into every call of a run. */
import type { Fault } from '../../shared/sandbox/kube/faults.ts';

export type MatrixFault = {
  name: string;
  fault: Omit<Fault, 'path' | 'method' | 'nth'>;
  pagedOnly?: boolean;
};

export const FAULTS: readonly MatrixFault[] = [
  { name: '500', fault: { status: 500 } },
  { name: '503', fault: { status: 503 } },
  { name: '429+RA', fault: { status: 429, retryAfterSeconds: 1 } },
  { name: 'timeout', fault: { delayMs: 700 } },
  { name: 'reset', fault: { reset: true } },
  { name: 'truncated', fault: { truncate: true } },
  { name: '403', fault: { status: 403 } },
  { name: '410', fault: { expireContinue: true }, pagedOnly: true },
  { name: 'empty page', fault: { emptyPage: true }, pagedOnly: true },
];
