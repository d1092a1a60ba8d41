/**
 * The Cinder CSI driver as a cluster runs it, for the real-Cinder suite: the Cinder CSI
 * plugin (cloud-provider-openstack v1.36.0, its controller service only) and the CSI
 * external-provisioner (v5.3.0) talking over a unix socket, beside a test apiserver and the
 * real Keystone + Cinder, with a kube-controller-manager running the PersistentVolume binder
 * and protection controllers (the provisioner acts on the claims the binder hands it). All
 * host processes, as test/cloud/build.sh builds them; each stopped by PID.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { type Cluster, freePort } from '../cluster/cluster.ts';
import { track } from '../helpers/children.ts';
import { nodeBinDir } from '../node/node.ts';
import { call, cloudConfGlobal, ok, passwordToken, type RealOpenStack } from '../openstack/real-openstack.ts';
import { CPO_VERSION } from './occm.ts';

const CACHE = process.env.TWOPASS_CACHE ?? join(homedir(), '.cache', 'twopass');
export const CSI_PLUGIN_BIN = join(CACHE, 'cloud', `cpo-${CPO_VERSION}`, 'cinder-csi-plugin');
export const PROVISIONER_VERSION = 'v5.3.0';
export const PROVISIONER_BIN = join(
  CACHE,
  'cloud',
  `external-provisioner-${PROVISIONER_VERSION}`,
  'csi-provisioner',
);
/** The driver's name, as its PersistentVolumes and StorageClasses say it. */
export const DRIVER = 'cinder.csi.openstack.org';

/** Why the CSI driver cannot run here, or undefined. */
export function csiMissing(): string | undefined {
  for (const b of [CSI_PLUGIN_BIN, PROVISIONER_BIN])
    if (!existsSync(b)) return `${b} is not built (test/cloud/build.sh)`;
  const kcm = join(nodeBinDir(), 'kube-controller-manager');
  if (!existsSync(kcm)) return `${kcm} is not built (test/node/build.sh binaries)`;
  return undefined;
}

export type Csi = Readonly<{
  /** The processes' logs so far. */
  log: (which: 'plugin' | 'provisioner' | 'controller-manager') => string;
  /** Kills the provisioner at once (SIGKILL, as a crash). */
  killProvisioner: () => Promise<void>;
  startProvisioner: () => void;
  stop: () => Promise<void>;
}>;

/**
 * The plugin for `clusterId` (its `--cluster`, written on every volume as the property
 * `cinder.csi.openstack.org/cluster`), authenticating as the project's application
 * credential; the provisioner with `--extra-create-metadata` (the PVC's and PV's names become
 * volume properties); the controller-manager's volume controllers.
 */
export async function startCsi(
  cluster: Cluster,
  os: RealOpenStack,
  clusterId: string,
  dir: string,
): Promise<Csi> {
  mkdirSync(dir, { recursive: true });
  const conf = join(dir, 'cloud.conf');
  writeFileSync(
    conf,
    [
      ...cloudConfGlobal(os),
      '[BlockStorage]',
      // no Nova: the topology and the attach paths are not in play
      'ignore-volume-az = true',
      '',
    ].join('\n'),
  );
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, cluster.kubeconfig());
  const sock = join(dir, 'csi.sock');
  const procs = new Map<string, ChildProcess>();
  const logs = { plugin: 'plugin.log', provisioner: 'provisioner.log', 'controller-manager': 'kcm.log' };
  const launch = (name: keyof typeof logs, bin: string, args: string[]) => {
    // a file, not a pipe: a pipe nobody drains stalls a chatty server
    const fd = openSync(join(dir, logs[name]), 'a');
    const c = spawn(bin, args, { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    track(c);
    procs.set(name, c);
  };
  const log = (which: keyof typeof logs) => {
    const p = join(dir, logs[which]);
    return existsSync(p) ? readFileSync(p, 'utf8') : '';
  };
  const kill = async (name: string, signal: NodeJS.Signals) => {
    const c = procs.get(name);
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => c.kill('SIGKILL'), 5000);
      c.once('exit', () => {
        clearTimeout(t);
        resolve();
      });
      c.kill(signal);
    });
  };
  const startProvisioner = () =>
    launch('provisioner', PROVISIONER_BIN, [
      `--csi-address=${sock}`,
      `--kubeconfig=${kubeconfig}`,
      '--extra-create-metadata',
      '--leader-election=false',
      // the real Cinder on 2 cores: a create can take a while; a hung one is retried with the same name
      '--timeout=30s',
      '--v=4',
    ]);
  // The plugin makes a Nova client beside its Cinder one at start (pkg/csi/cinder/openstack,
  // CreateOpenStackProvider) and exits without a compute endpoint in the catalog; only attaching
  // would call it. One that answers nothing (a closed loopback port) is enough, and it goes at stop.
  const admin = () => passwordToken(os.authUrl, 'admin', os.admin.password, 'admin');
  let compute: string | undefined;
  const stop = async () => {
    for (const n of ['provisioner', 'plugin', 'controller-manager']) await kill(n, 'SIGTERM');
    if (compute) await call('DELETE', `${os.authUrl}/services/${compute}`, await admin());
  };
  try {
    const token = await admin();
    compute = (
      (
        await ok('POST', `${os.authUrl}/services`, token, {
          service: { name: 'nova-absent', type: 'compute' },
        })
      ).service as { id: string }
    ).id;
    const nowhere = `http://127.0.0.1:${await freePort()}/v2.1`;
    for (const iface of ['public', 'internal', 'admin'])
      await ok('POST', `${os.authUrl}/endpoints`, token, {
        endpoint: { service_id: compute, interface: iface, url: nowhere, region_id: os.region },
      });
    launch('controller-manager', join(nodeBinDir(), 'kube-controller-manager'), [
      `--kubeconfig=${kubeconfig}`,
      '--leader-elect=false',
      '--secure-port=0',
      '--use-service-account-credentials=false',
      '--controllers=persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller',
      '--v=2',
    ]);
    launch('plugin', CSI_PLUGIN_BIN, [
      `--endpoint=unix://${sock}`,
      `--cloud-config=${conf}`,
      `--cluster=${clusterId}`,
      '--provide-node-service=false',
      '--with-topology=false',
      '--v=4',
    ]);
    const until = Date.now() + 30_000;
    while (!existsSync(sock)) {
      const p = procs.get('plugin')!;
      if (p.exitCode !== null)
        throw new Error(`the Cinder CSI plugin exited (${p.exitCode}): ${log('plugin').slice(-2000)}`);
      if (Date.now() > until)
        throw new Error(`the Cinder CSI plugin made no socket in 30 s: ${log('plugin').slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    startProvisioner();
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    log,
    killProvisioner: () => kill('provisioner', 'SIGKILL'),
    startProvisioner,
    stop,
  };
}
