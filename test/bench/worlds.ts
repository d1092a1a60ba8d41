/** Bulk-seeded worlds for the end-to-end benchmarks (no HTTP creates: straight into the fake's store). */
import { Bitmap } from '../../functions/danm-endpoints/bitmap.ts';
import { CONTROLLER_DESCRIPTION, MANAGED_TAG, PORT_ANNOTATION } from '../../functions/lbaas-ports/index.ts';
import { IPPOOLS, NETWORK_STATUS } from '../../functions/whereabouts-ips/model.ts';
import { DEPLOYMENTS, PODS, SERVICES } from '../../shared/kube/resources.ts';
import { formatAddress, parseCidr } from '../../shared/net/ip.ts';
import type { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import type { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { R } from '../../shared/sandbox/scenarios/danm.ts';

export const NS = 'bench';

function pods(fake: FakeKubeServer, n: number, annotate?: (i: number) => Record<string, string>) {
  return fake.store.seed(
    PODS,
    Array.from({ length: n }, (_, i) => ({
      metadata: {
        name: `pod-${i}`,
        namespace: NS,
        labels: { app: 'bench', 'pod-template-hash': 'abcdef1234' },
        ...(annotate ? { annotations: annotate(i) } : {}),
      },
      spec: {
        nodeName: `node-${i % 50}`,
        containers: [
          {
            name: 'app',
            image: 'registry.local/app:1.0',
            ports: [{ containerPort: 8080 }],
            resources: { requests: { cpu: '10m', memory: '16Mi' } },
          },
        ],
      },
      status: { phase: 'Running', podIP: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` },
    })),
  );
}

/** N pods, N DanmEps (1% of them orphans: their pods are gone), one DanmNet holding every address. */
export function danmWorld(fake: FakeKubeServer, n: number): void {
  const cidr = parseCidr('10.128.0.0/14')!;
  const live = pods(fake, n, () => ({ 'danm.k8s.io/interfaces': '[{"network":"net"}]' }));
  const bytes = Bitmap.empty(cidr)
    .with(0, true)
    .with(Number(cidr.size) - 1, true).bytes;
  for (let i = 1; i <= n; i++) bytes[i >> 3]! |= 0x80 >> (i & 7);
  fake.store.seed(R.DanmNet, [
    {
      metadata: { name: 'net', namespace: NS },
      spec: { NetworkID: 'net', Options: { cidr: cidr.text, alloc: Buffer.from(bytes).toString('base64') } },
    },
  ]);
  fake.store.seed(
    R.danmeps,
    Array.from({ length: n }, (_, i) => ({
      metadata: { name: `ep-${String(i).padStart(7, '0')}`, namespace: NS },
      spec: {
        NetworkName: 'net',
        apiType: 'DanmNet',
        NetworkType: 'ipvlan',
        Pod: `pod-${i}`,
        PodUID: i % 100 === 0 ? `gone-${i}` : live[i]!.metadata.uid,
        Host: `node-${i % 50}`,
        CID: `cid${i}`,
        Interface: {
          Name: 'eth0',
          Address: `${formatAddress(4, cidr.network + BigInt(i + 1))}/14`,
          MacAddress: '02:00:00:00:00:01',
        },
      },
    })),
  );
}

/** N pods with network-status, IPPools of 1000 allocations (1% orphans). */
export function whereaboutsWorld(fake: FakeKubeServer, n: number): void {
  const pools = Math.ceil(n / 1000);
  pods(fake, n, (i) => ({
    [NETWORK_STATUS]: JSON.stringify([{ name: 'net', interface: 'net1', ips: [addr(i)] }]),
  }));
  const seeds = [];
  for (let p = 0; p < pools; p++) {
    const allocations: Record<string, { id: string; podref: string; ifname: string }> = {};
    for (let j = 0; j < 1000 && p * 1000 + j < n; j++) {
      const i = p * 1000 + j;
      allocations[String(j + 1)] = {
        id: `c${i}`,
        podref: `${NS}/${i % 100 === 0 ? `gone-${i}` : `pod-${i}`}`,
        ifname: 'net1',
      };
    }
    seeds.push({
      metadata: { name: `pool-${p}`, namespace: NS },
      spec: { range: poolRange(p), allocations },
    });
  }
  fake.store.seed(IPPOOLS, seeds);
}

function poolRange(p: number): string {
  return `10.${64 + (p >> 6)}.${(p & 63) * 4}.0/22`;
}

function addr(i: number): string {
  const p = Math.floor(i / 1000);
  const c = parseCidr(poolRange(p))!;
  return formatAddress(4, c.network + BigInt((i % 1000) + 1));
}

/** N Services, N tagged ports with FIPs (1% orphans: no Service names them). */
export function lbaasWorld(fake: FakeKubeServer, os: FakeOpenStack, n: number): void {
  // the ch-k8s-lbaas controller scaled to 0: its Deployment and pods are read every run
  fake.store.seed(DEPLOYMENTS, [
    {
      metadata: { name: 'ch-k8s-lbaas-controller', namespace: 'kube-system' },
      spec: { replicas: 0, selector: { matchLabels: { app: 'ch-k8s-lbaas-controller' } } },
    },
  ]);
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
    ids.push(id);
    os.ports.set(id, {
      id,
      name: `lb-${i}`,
      description: CONTROLLER_DESCRIPTION,
      project_id: 'project-a',
      tenant_id: 'project-a',
      tags: [MANAGED_TAG],
      device_id: '',
      device_owner: '',
      fixed_ips: [{ ip_address: `10.1.${(i >> 8) & 255}.${i & 255}` }],
      revision_number: 1,
      status: 'DOWN',
    });
    os.fips.set(`f${id}`, {
      id: `f${id}`,
      floating_ip_address: `203.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
      port_id: id,
      project_id: 'project-a',
      tags: [MANAGED_TAG],
      revision_number: 1,
    });
  }
  fake.store.seed(
    SERVICES,
    Array.from({ length: n }, (_, i) => ({
      metadata: {
        name: `svc-${i}`,
        namespace: NS,
        annotations: {
          'cah-loadbalancer.k8s.cloudandheat.com/managed': 'true',
          ...(i % 100 === 0 ? {} : { [PORT_ANNOTATION]: ids[i]! }),
        },
      },
      spec: { type: i % 100 === 0 ? 'ClusterIP' : 'LoadBalancer', ports: [{ port: 80 }] },
      // The orphans' Services were changed to ClusterIP: no ingress names their port's address.
      status:
        i % 100 === 0
          ? {}
          : { loadBalancer: { ingress: [{ ip: `203.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` }] } },
    })),
  );
}
