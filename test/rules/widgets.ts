/** The small rule the rule tests share: Widgets of example.com whose Pod (by UID) is gone. */
import type { ResourceRef } from '../../shared/kube/resources.ts';

export const WIDGETS: ResourceRef = {
  group: 'example.com',
  version: 'v1',
  plural: 'widgets',
  kind: 'Widget',
  namespaced: true,
};

/** A fresh copy each call (tests change fields). It reads spec.podUID: a widget without it makes `inUse` error. */
export const widgetsRule = (): Record<string, unknown> & { evidence: { pods: Record<string, unknown> } } => ({
  name: 'widgets',
  description: 'widgets whose pod (by UID) is gone',
  target: { group: 'example.com', version: 'v1', resource: 'widgets', kind: 'Widget', namespaced: true },
  owner: { group: 'example.com' },
  evidence: {
    pods: {
      group: '',
      version: 'v1',
      resource: 'pods',
      kind: 'Pod',
      namespaced: true,
      key: 'object.metadata.uid',
    },
  },
  inUse: 'object.spec.podUID in evidence.pods',
});
