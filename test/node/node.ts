/**
 * A real node beside a test apiserver: Debian's containerd (runc, the bridge CNI plugin on
 * its own bridge), and a kubelet, kube-controller-manager and kube-scheduler built at the
 * apiserver's version (test/node/build.sh), set up as ../shared/reference/node.md records
 * (cgroup v1 allowed, a local pause image, restrict_oom_score_adj, no registry). Images
 * come from OCI archives imported into containerd. Everything runs from a temp directory,
 * listens on 127.0.0.1, and is stopped by PID.
 *
 * Pods reach the apiserver as in any cluster, at the `kubernetes` Service (10.0.0.1:443,
 * KUBERNETES_SERVICE_HOST), with their ServiceAccount's token and the cluster's CA (the
 * kube-root-ca.crt ConfigMap the controller manager publishes). No kube-proxy runs here:
 * one iptables DNAT rule does its job for that one Service, from the pods' bridge to the
 * apiserver on 127.0.0.1 (route_localnet on that bridge only). The rule and the bridge
 * are removed at stop.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Cluster, freePort, KUBE_VERSION } from '../cluster/cluster.ts';
import { track } from '../helpers/children.ts';

export const NODE_NAME = 'twopass-node';
const CACHE = process.env.TWOPASS_CACHE ?? join(homedir(), '.cache/twopass');
export const nodeBinDir = () => join(CACHE, 'node', KUBE_VERSION);
export const IMAGE_ARCHIVE = join(CACHE, 'node', 'images', 'twopass-test.tar');

/** Whether this machine can run the node: root, the Debian packages and the built binaries. */
export function nodeAvailable(): string | undefined {
  if (process.env.TWOPASS_NO_NODE === '1') return 'TWOPASS_NO_NODE=1';
  if (process.getuid?.() !== 0) return 'not root';
  for (const cmd of ['containerd', 'runc', 'buildah', 'ctr'])
    if (!existsSync(`/usr/bin/${cmd}`) && !existsSync(`/usr/sbin/${cmd}`)) return `${cmd} is not installed`;
  for (const b of ['kubelet', 'kube-scheduler', 'kube-controller-manager'])
    if (!existsSync(join(nodeBinDir(), b))) return `${b} is not built (test/node/build.sh)`;
  if (!existsSync('/usr/lib/cni/bridge')) return 'the CNI plugins are not installed';
  return undefined;
}

/** What the node's CNI configuration is, made in the node's directory (conf_dir is `cni/`). */
export type CniSetup = Readonly<{
  /** File name in conf_dir to its content; the first by name is the network containerd uses. */
  conf: (paths: { dir: string; kubeconfig: string; binDir: string }) => Record<string, string>;
  /** Plugins beside Debian's in the one bin_dir containerd has (name to binary). */
  plugins?: Readonly<Record<string, string>>;
  /** Bridges the plugins make, removed at stop. */
  bridges?: readonly string[];
}>;

export type Node = Readonly<{
  dir: string;
  /** An admin kubeconfig on the host (127.0.0.1), as the CNI plugins use it. */
  kubeconfig: string;
  ctr: (...args: string[]) => string;
  /** `ctr images tag SRC DST`, done again after a restart (containerd's store is wiped with the node). */
  tag: (src: string, dst: string) => void;
  /**
   * The node is lost: the kubelet, containerd and the shims killed, the pods' network
   * namespaces gone, containerd's state and the CNI caches wiped. No CNI DEL is ever called.
   */
  lose: () => Promise<void>;
  /** The node comes back under the same name: containerd (images imported again), then the kubelet. */
  restart: () => Promise<void>;
  /** Makes 10.88.0.1:`port` (the bridge's address) reach 127.0.0.1:`port` from the pods. */
  expose: (port: number) => void;
  stop: () => Promise<void>;
}>;

export const BRIDGE = 'tp0';
export const BRIDGE_IP = '10.88.0.1';
const SERVICE_IP = '10.0.0.1';

/** The CA that signed the apiserver's self-made serving certificate (the second PEM of its file). */
function clusterCa(cluster: Cluster): string {
  const pem = readFileSync(join(cluster.dir, 'certs', 'apiserver.crt'), 'utf8');
  const certs = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/g) ?? [];
  const ca = certs[certs.length - 1];
  if (!ca || certs.length < 2) throw new Error('the apiserver certificate has no CA beside it');
  return ca;
}

/** A rule is its chain, then its match and target. */
const ipt = (op: '-A' | '-D', [chain, ...rule]: string[]) =>
  execFileSync('iptables', ['-t', 'nat', op, chain!, ...rule]);
/** PREROUTING from the pods' bridge, or OUTPUT (the host's own processes, and host-network pods). */
const dnat = (dst: string, dport: number, to: string, chain: 'PREROUTING' | 'OUTPUT' = 'PREROUTING') => [
  chain,
  ...(chain === 'PREROUTING' ? ['-i', BRIDGE] : []),
  '-d',
  dst,
  '-p',
  'tcp',
  '--dport',
  String(dport),
  '-m',
  'comment',
  '--comment',
  'twopass-test-node',
  '-j',
  'DNAT',
  '--to-destination',
  to,
];

async function waitFor(what: string, ms: number, ok: () => boolean | Promise<boolean>): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (await Promise.resolve(ok()).catch(() => false)) return;
    if (Date.now() > until) throw new Error(`${what}: not ready within ${ms / 1000}s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The local pause image (busybox-static sleeping), built once with buildah into an archive. */
function pauseArchive(): string {
  const out = join(CACHE, 'node', 'images', 'pause.tar');
  if (existsSync(out)) return out;
  mkdirSync(join(CACHE, 'node', 'images'), { recursive: true });
  const sh = (...a: string[]) => execFileSync('buildah', a, { encoding: 'utf8' }).trim();
  const c = sh('from', 'scratch');
  const m = sh('mount', c);
  mkdirSync(join(m, 'bin'), { recursive: true });
  execFileSync('cp', ['/bin/busybox', join(m, 'bin/busybox')]);
  sh('umount', c);
  sh('config', '--entrypoint', '["/bin/busybox","sleep","2147483647"]', c);
  sh('commit', '--quiet', c, 'localhost/pause:test');
  sh('rm', c);
  sh('push', '--quiet', 'localhost/pause:test', `oci-archive:${out}:localhost/pause:test`);
  return out;
}

/** The bridge plugin with host-local on `tp0`: the cluster network. */
export function clusterNetwork(dir: string) {
  return {
    cniVersion: '0.4.0',
    name: 'twopass-test',
    plugins: [
      {
        type: 'bridge',
        bridge: BRIDGE,
        isGateway: true,
        ipMasq: false,
        ipam: {
          type: 'host-local',
          ranges: [[{ subnet: '10.88.0.0/16', gateway: BRIDGE_IP }]],
          routes: [{ dst: '0.0.0.0/0' }],
          dataDir: join(dir, 'ipam'),
        },
      },
      { type: 'loopback' },
    ],
  };
}
const BRIDGE_ONLY: CniSetup = {
  conf: ({ dir }) => ({ '10-bridge.conflist': JSON.stringify(clusterNetwork(dir)) }),
};

/** The network namespaces on the host (`ip netns`), to tell the node's pods' from others. */
const netnsNames = () =>
  new Set(
    spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' })
      .stdout.split('\n')
      .map((l) => l.split(' ')[0]!)
      .filter(Boolean),
  );

/** Starts containerd and the kubelet against `cluster`. */
export async function startNode(
  cluster: Cluster,
  images: readonly string[],
  { cni = BRIDGE_ONLY }: { cni?: CniSetup } = {},
): Promise<Node> {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-node-'));
  const children: ChildProcess[] = [];
  const netnsBefore = netnsNames();
  // The servers write their logs to files themselves: a pipe drained by this process would
  // stall them (and a `ctr` waiting on containerd) whenever a test blocks on a synchronous call.
  const launch = (name: string, bin: string, args: string[]) => {
    const log = openSync(join(dir, `${name}.log`), 'a');
    const c = track(spawn(bin, args, { stdio: ['ignore', log, log] }));
    closeSync(log);
    children.push(c);
    return c;
  };
  const sock = join(dir, 'containerd.sock');
  const ctr = (...args: string[]) =>
    execFileSync('ctr', ['-a', sock, '-n', 'k8s.io', ...args], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 120_000,
    }).trim();
  const rules: string[][] = [];
  const stop = async () => {
    for (const c of [...children].reverse()) c.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    const quietly = (f: () => unknown) => {
      try {
        f();
      } catch {
        /* already gone */
      }
    };
    // the shims containerd left behind, and the kubelet's mounts
    quietly(() => execFileSync('pkill', ['-f', `containerd-shim-runc-v2.*${dir}`]));
    quietly(() =>
      execFileSync('sh', ['-c', `mount | awk '{print $3}' | grep '^${dir}' | sort -r | xargs -r umount -l`]),
    );
    for (const r of rules.splice(0)) quietly(() => ipt('-D', r));
    for (const n of netnsNames()) if (!netnsBefore.has(n)) spawnSync('ip', ['netns', 'delete', n]);
    for (const b of [BRIDGE, ...(cni.bridges ?? [])])
      quietly(() => execFileSync('ip', ['link', 'delete', b]));
    process.removeListener('exit', atExit);
    if (!process.env.TWOPASS_KEEP_NODE_DIR) rmSync(dir, { recursive: true, force: true });
  };
  // however the test process ends, the host keeps no rule and no bridge of ours
  const atExit = () => {
    for (const r of rules) {
      try {
        ipt('-D', r);
      } catch {
        /* gone */
      }
    }
    for (const b of [BRIDGE, ...(cni.bridges ?? [])]) spawnSync('ip', ['link', 'delete', b]);
    // the shims and mounts the servers leave behind (they were SIGKILLed by PID on exit)
    spawnSync('pkill', ['-f', `containerd-shim-runc-v2.*${dir}`]);
    spawnSync('sh', ['-c', `mount | awk '{print $3}' | grep '^${dir}' | sort -r | xargs -r umount -l`]);
  };
  process.once('exit', atExit);
  // a test interrupted (SIGINT, SIGTERM) exits through the handlers above, and the servers'
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    if (process.listenerCount(sig) === 0) process.once(sig, () => process.exit(130));
  const expose = (port: number) => {
    const r = dnat(BRIDGE_IP, port, `127.0.0.1:${port}`);
    ipt('-A', r);
    rules.push(r);
  };
  try {
    // The pods' bridge, made before the CNI plugin would, so that only it gets route_localnet;
    // then the `kubernetes` Service's address led to the apiserver on loopback.
    execFileSync('ip', ['link', 'add', BRIDGE, 'type', 'bridge']);
    execFileSync('ip', ['addr', 'add', `${BRIDGE_IP}/16`, 'dev', BRIDGE]);
    execFileSync('ip', ['link', 'set', BRIDGE, 'up']);
    writeFileSync(`/proc/sys/net/ipv4/conf/${BRIDGE}/route_localnet`, '1');
    const apiPort = Number(new URL(cluster.server).port);
    // and for host-network pods (a test that needs the host's loopback), from the host itself
    for (const chain of ['PREROUTING', 'OUTPUT'] as const) {
      const r = dnat(SERVICE_IP, 443, `127.0.0.1:${apiPort}`, chain);
      ipt('-A', r);
      rules.push(r);
    }
    // containerd: its own root, state and socket; the local pause image; the node's CNI
    // configuration, with Debian's plugins and the setup's own in one bin_dir
    const binDir = join(dir, 'cni-bin');
    mkdirSync(binDir);
    for (const f of readdirSync('/usr/lib/cni')) symlinkSync(join('/usr/lib/cni', f), join(binDir, f));
    for (const [name, bin] of Object.entries(cni.plugins ?? {})) symlinkSync(bin, join(binDir, name));
    const cfg = execFileSync('containerd', ['config', 'default'], { encoding: 'utf8' })
      .replace(/^root = ".*"$/m, `root = "${dir}/containerd/root"`)
      .replace(/^state = ".*"$/m, `state = "${dir}/containerd/state"`)
      .replace(/^ {2}address = "\/run\/containerd\/containerd.sock"$/m, `  address = "${sock}"`)
      .replace('restrict_oom_score_adj = false', 'restrict_oom_score_adj = true')
      .replace(/sandbox_image = ".*"/, 'sandbox_image = "localhost/pause:test"')
      .replace('bin_dir = "/opt/cni/bin"', `bin_dir = "${binDir}"`)
      .replace('conf_dir = "/etc/cni/net.d"', `conf_dir = "${dir}/cni"`);
    writeFileSync(join(dir, 'containerd.toml'), cfg);
    mkdirSync(join(dir, 'cni'));
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, cluster.kubeconfig());
    const networks: string[] = [];
    for (const [file, text] of Object.entries(cni.conf({ dir, kubeconfig, binDir }))) {
      writeFileSync(join(dir, 'cni', file), text);
      const name = /\.conf(list)?$/.test(file) && (JSON.parse(text) as { name?: string }).name;
      if (name) networks.push(name);
    }
    const startContainerd = async () => {
      launch('containerd', 'containerd', ['--config', join(dir, 'containerd.toml')]);
      await waitFor('containerd', 20_000, () => existsSync(sock));
      ctr('images', 'import', pauseArchive());
      for (const i of images) ctr('images', 'import', i);
    };
    await startContainerd();

    const kubeletPort = await freePort();
    writeFileSync(
      join(dir, 'kubelet.yaml'),
      [
        'apiVersion: kubelet.config.k8s.io/v1beta1',
        'kind: KubeletConfiguration',
        'failCgroupV1: false',
        'cgroupDriver: cgroupfs',
        `containerRuntimeEndpoint: unix://${sock}`,
        'failSwapOn: false',
        'resolvConf: ""',
        'enforceNodeAllocatable: []',
        'clusterDNS: ["10.0.0.10"]',
        'clusterDomain: cluster.local',
        'address: 127.0.0.1',
        `port: ${kubeletPort}`,
        'readOnlyPort: 0',
        'healthzBindAddress: 127.0.0.1',
        `healthzPort: ${await freePort()}`,
        'authentication: { anonymous: { enabled: false }, webhook: { enabled: false } }',
        'authorization: { mode: AlwaysAllow }',
        `podLogsDir: ${dir}/pod-logs`,
        'evictionHard: {}',
        'imageGCHighThresholdPercent: 100',
        '',
      ].join('\n'),
    );
    const nb = nodeBinDir();
    writeFileSync(join(dir, 'ca.crt'), clusterCa(cluster));
    // The ServiceAccount, token, root-CA publisher, CronJob, Job and garbage-collector controllers (all of them)
    launch('kube-controller-manager', join(nb, 'kube-controller-manager'), [
      `--kubeconfig=${kubeconfig}`,
      '--leader-elect=false',
      '--secure-port=0',
      `--root-ca-file=${join(dir, 'ca.crt')}`,
      `--service-account-private-key-file=${join(cluster.dir, 'sa.key')}`,
      '--use-service-account-credentials=false',
      '--controllers=*',
      '--concurrent-cron-job-syncs=2',
      '--v=1',
    ]);
    launch('kube-scheduler', join(nb, 'kube-scheduler'), [
      `--kubeconfig=${kubeconfig}`,
      '--leader-elect=false',
      '--secure-port=0',
      '--v=1',
    ]);
    const startKubelet = () =>
      launch('kubelet', join(nb, 'kubelet'), [
        `--config=${join(dir, 'kubelet.yaml')}`,
        `--kubeconfig=${kubeconfig}`,
        `--root-dir=${join(dir, 'kubelet')}`,
        `--cert-dir=${join(dir, 'kubelet-certs')}`,
        `--hostname-override=${NODE_NAME}`,
        '--v=1',
      ]);
    startKubelet();
    const lose = async () => {
      const lost = children.filter(
        (c) => c.spawnargs[0] === 'containerd' || c.spawnargs[0]?.endsWith('/kubelet'),
      );
      for (const c of lost) c.kill('SIGKILL');
      await Promise.all(
        lost.map((c) => (c.exitCode === null && c.signalCode === null ? once(c, 'exit') : null)),
      );
      for (const c of lost) children.splice(children.indexOf(c), 1);
      spawnSync('pkill', ['-KILL', '-f', `containerd-shim-runc-v2.*${dir}`]);
      // the pods' network namespaces (and with them their veths) go with the machine
      for (const n of netnsNames()) if (!netnsBefore.has(n)) spawnSync('ip', ['netns', 'delete', n]);
      spawnSync('sh', ['-c', `mount | awk '{print $3}' | grep '^${dir}' | sort -r | xargs -r umount -l`]);
      rmSync(join(dir, 'containerd'), { recursive: true, force: true });
      rmSync(sock, { force: true });
      // the CNI caches: containerd's results, Multus' and host-local's, all under the node's directory
      for (const d of ['multus', 'ipam']) rmSync(join(dir, d), { recursive: true, force: true });
      // containerd's (libcni's) result cache is the host's: only this node's networks' entries
      const results = '/var/lib/cni/results';
      if (existsSync(results))
        for (const f of readdirSync(results))
          if (networks.some((n) => f.startsWith(`${n}-`))) rmSync(join(results, f), { force: true });
    };
    const tags: [string, string][] = [];
    const tag = (src: string, dst: string) => {
      ctr('images', 'tag', src, dst);
      tags.push([src, dst]);
    };
    const restart = async () => {
      await startContainerd();
      for (const [src, dst] of tags) ctr('images', 'tag', src, dst);
      startKubelet();
    };
    return { dir, kubeconfig, ctr, tag, expose, lose, restart, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The log of a pod's container, as the kubelet wrote it (`kubectl logs` without the kubelet's API). */
export function podLog(node: Node, namespace: string, pod: string, container: string): string {
  const base = join(node.dir, 'pod-logs');
  const d = execFileSync('ls', [base], { encoding: 'utf8' })
    .split('\n')
    .find((x) => x.startsWith(`${namespace}_${pod}_`));
  if (!d) return '';
  const file = join(base, d, container, '0.log');
  if (!existsSync(file)) return '';
  // CRI log lines: TIME STREAM TAG TEXT
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.split(' ').slice(3).join(' '))
    .join('\n');
}
