/** The fake API server's discovery: the API groups it serves, and each group version's resources. */
import { FakeApiError, type FakeStore } from './store.ts';

/** /apis: every group of the store's resources, with its versions. */
export function groupList(store: FakeStore): unknown {
  const groups = new Map<string, Set<string>>();
  for (const r of store.resources.values()) {
    if (r.group === '') continue;
    if (!groups.has(r.group)) groups.set(r.group, new Set());
    groups.get(r.group)!.add(r.version);
  }
  return {
    kind: 'APIGroupList',
    apiVersion: 'v1',
    groups: [...groups].map(([name, versions]) => ({
      name,
      versions: [...versions].map((v) => ({ groupVersion: `${name}/${v}`, version: v })),
      preferredVersion: { groupVersion: `${name}/${[...versions][0]}`, version: [...versions][0] },
    })),
  };
}

/** /api/v1 or /apis/GROUP/VERSION: the resources of one group version (404 when it serves none). */
export function resourceList(store: FakeStore, group: string, version: string): unknown {
  const resources = [...store.resources.values()].filter((r) => r.group === group && r.version === version);
  if (resources.length === 0)
    throw new FakeApiError(404, 'NotFound', 'the server could not find the requested resource');
  return {
    kind: 'APIResourceList',
    apiVersion: 'v1',
    groupVersion: group === '' ? version : `${group}/${version}`,
    resources: resources.map((r) => ({
      name: r.plural,
      singularName: r.kind.toLowerCase(),
      namespaced: r.namespaced,
      kind: r.kind,
      verbs: ['create', 'delete', 'get', 'list', 'patch', 'update'],
    })),
  };
}
