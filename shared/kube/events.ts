/** Kubernetes Events written by twopass (core/v1, so every cluster accepts them). */
import type { KubeWriter } from './ports.ts';
import { EVENTS, type KubeObject } from './resources.ts';

export type InvolvedObject = Readonly<{
  apiVersion: string;
  kind: string;
  name: string;
  namespace?: string;
  uid?: string;
}>;

export async function recordEvent(
  kube: KubeWriter,
  namespace: string,
  involved: InvolvedObject,
  reason: string,
  message: string,
  type: 'Normal' | 'Warning',
  now: number,
  signal?: AbortSignal,
): Promise<KubeObject> {
  const time = new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z');
  return kube.create(
    EVENTS,
    {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: 'twopass-', namespace },
      involvedObject: { ...involved },
      reason,
      message: message.slice(0, 1000),
      type,
      source: { component: 'twopass' },
      reportingComponent: 'twopass',
      reportingInstance: 'twopass',
      firstTimestamp: time,
      lastTimestamp: time,
      count: 1,
    },
    signal,
  );
}
