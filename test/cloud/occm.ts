/**
 * cloud-provider-openstack's openstack-cloud-controller-manager (OCCM), v1.36.0 as
 * test/cloud/build.sh builds it, run as a host process beside a test apiserver and the real
 * Keystone + Neutron + Octavia (no-op provider), its `service` controller only, as
 * ../shared/reference/producers.md records: it makes a real load balancer, floating IP and
 * security group for each Service of type LoadBalancer.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Cluster } from '../cluster/cluster.ts';
import { cloudConfGlobal, type RealOpenStack } from '../openstack/real-openstack.ts';

export const CPO_VERSION = 'v1.36.0';
export const OCCM_BIN = join(
  process.env.TWOPASS_CACHE ?? join(homedir(), '.cache', 'twopass'),
  'cloud',
  `cpo-${CPO_VERSION}`,
  'openstack-cloud-controller-manager',
);

/** Why OCCM cannot run here, or undefined. */
export function occmMissing(os: RealOpenStack | undefined): string | undefined {
  if (!existsSync(OCCM_BIN)) return `${OCCM_BIN} is not built (test/cloud/build.sh)`;
  if (!os) return 'no real Keystone + Neutron';
  if (!os.octaviaUrl) return 'no real Octavia';
  return undefined;
}

export type Occm = Readonly<{
  /** Its log so far (klog on stderr). */
  log: () => string;
  /** Kills it at once (SIGKILL: no cleanup, as a crash or a lost node). */
  kill: () => Promise<void>;
  /** Starts it again with the same configuration, or under another `--cluster-name`. */
  start: (clusterName?: string) => Promise<void>;
  running: () => boolean;
}>;

/**
 * OCCM for `cluster` under `clusterName`, authenticating as the project's application
 * credential, its load balancers' VIPs in the test subnet and their floating IPs on the
 * external network, managing security groups (the nodes' ports get them).
 */
export async function startOccm(
  cluster: Cluster,
  os: RealOpenStack,
  clusterName: string,
  dir: string,
): Promise<Occm> {
  mkdirSync(dir, { recursive: true });
  const conf = join(dir, 'cloud.conf');
  writeFileSync(
    conf,
    [
      ...cloudConfGlobal(os),
      '[LoadBalancer]',
      `subnet-id = ${os.subnetId}`,
      `floating-network-id = ${os.externalNetworkId}`,
      'lb-provider = noop_driver',
      'manage-security-groups = true',
      'create-monitor = false',
      '',
    ].join('\n'),
  );
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, cluster.kubeconfig());
  const logPath = join(dir, 'occm.log');
  let child: ChildProcess | undefined;
  let name = clusterName;
  const start = async () => {
    // a file, not a pipe: a pipe nobody drains stalls a chatty server
    const fd = openSync(logPath, 'a');
    child = spawn(
      OCCM_BIN,
      [
        '--cloud-provider=openstack',
        `--cloud-config=${conf}`,
        '--controllers=service',
        '--leader-elect=false',
        '--secure-port=0',
        '--use-service-account-credentials=false',
        `--cluster-name=${name}`,
        `--kubeconfig=${kubeconfig}`,
        '--concurrent-service-syncs=2',
        '--v=2',
      ],
      { stdio: ['ignore', fd, fd] },
    );
    closeSync(fd);
    const c = child;
    // it authenticates to Keystone at start and exits if it cannot
    const until = Date.now() + 30_000;
    while (Date.now() < until) {
      if (c.exitCode !== null) throw new Error(`OCCM exited (${c.exitCode}): ${log().slice(-2000)}`);
      if (/Starting service controller|Waiting for caches to sync for service/.test(log())) return;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`OCCM did not start its service controller in 30 s: ${log().slice(-2000)}`);
  };
  const log = () => (existsSync(logPath) ? readFileSync(logPath, 'utf8') : '');
  const kill = async () => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.kill('SIGKILL');
    });
  };
  await start();
  return {
    log,
    kill,
    start: async (next?: string) => {
      if (next !== undefined) name = next;
      await start();
    },
    running: () => child !== undefined && child.exitCode === null && child.signalCode === null,
  };
}
