/**
 * startCinder(): a real Cinder (Block Storage v3, Debian's python3-cinder, Zed) beside the
 * real Keystone and MariaDB that `npm test` started: its API, scheduler and volume service
 * as three processes, the volume service on Cinder's own fake driver
 * (cinder.tests.fake_driver.FakeLoggingVolumeDriver, the one Cinder's functional tests use: no
 * LVM, no disks), and a RabbitMQ of its own between them (with its own epmd) on loopback
 * ports, as ../shared/reference/producers.md records. Its database, Keystone user, service
 * and endpoints are its own and are removed when it stops, so one test file's Cinder never
 * shows in another's catalog. Every process is stopped by PID.
 */
import { type ChildProcess, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../cluster/cluster.ts';
import { call, ok, passwordToken, type RealOpenStack, run, start, until } from './real-openstack.ts';

const PY = '/usr/bin/python3';
const RABBIT = '/usr/lib/rabbitmq/bin/rabbitmq-server';

/** Why a real Cinder cannot start here, or undefined. */
export function cinderMissing(): string | undefined {
  if (!existsSync(RABBIT) || !existsSync('/usr/bin/epmd')) return "Debian's rabbitmq-server is not installed";
  const r = spawnSync(PY, ['-c', 'import cinder.cmd.api, cinder.tests.fake_driver'], { stdio: 'ignore' });
  if (r.status !== 0) return "Debian's python3-cinder is not installed";
  return undefined;
}

export type RealCinder = Readonly<{
  /** The API's root (the catalog's endpoint is `${url}/v3/<project id>`). */
  url: string;
  /** osapi_max_limit: the most volumes one page holds. */
  maxLimit: number;
  /** The scheduler's process: SIGSTOP holds every new volume in `creating`, SIGCONT lets it go on. */
  schedulerPid: number;
  /** The services' logs. */
  dir: string;
  stop: () => Promise<void>;
}>;

const PASTE = `[composite:osapi_volume]
use = call:cinder.api:root_app_factory
/: apiversions
/v3: openstack_volume_api_v3

[composite:openstack_volume_api_v3]
use = call:cinder.api.middleware.auth:pipeline_factory
keystone = request_id faultwrap sizelimit authtoken keystonecontext apiv3
keystone_nolimit = request_id faultwrap sizelimit authtoken keystonecontext apiv3

[filter:request_id]
paste.filter_factory = oslo_middleware.request_id:RequestId.factory

[filter:faultwrap]
paste.filter_factory = cinder.api.middleware.fault:FaultWrapper.factory

[filter:sizelimit]
paste.filter_factory = oslo_middleware.sizelimit:RequestBodySizeLimiter.factory

[filter:authtoken]
paste.filter_factory = keystonemiddleware.auth_token:filter_factory

[filter:keystonecontext]
paste.filter_factory = cinder.api.middleware.auth:CinderKeystoneContext.factory

[app:apiv3]
paste.app_factory = cinder.api.v3.router:APIRouter.factory

[pipeline:apiversions]
pipeline = faultwrap osvolumeversionapp

[app:osvolumeversionapp]
paste.app_factory = cinder.api.versions:Versions.factory
`;

/**
 * The filters the API accepts on a listing (resource_query_filters_file): Cinder's own
 * etc/cinder/resource_filters.json. Without it every filter is refused (400 "Invalid filters
 * ... are found in query options"), and the CSI plugin looks a volume up by name.
 */
const RESOURCE_FILTERS = {
  volume: [
    'name',
    'status',
    'metadata',
    'bootable',
    'migration_status',
    'availability_zone',
    'group_id',
    'size',
    'created_at',
    'updated_at',
  ],
  backup: ['name', 'status', 'volume_id'],
  snapshot: ['name', 'status', 'volume_id', 'metadata', 'availability_zone'],
  group: [],
  group_snapshot: ['status', 'group_id'],
  attachment: ['volume_id', 'status', 'instance_id', 'attach_status'],
  message: ['resource_uuid', 'resource_type', 'event_id', 'request_id', 'message_level'],
  pool: ['name', 'volume_type'],
  volume_type: ['is_public'],
};

/** Stops each process by PID: SIGTERM, then SIGKILL after 5 s. */
async function stopAll(procs: ChildProcess[]): Promise<void> {
  for (const p of [...procs].reverse())
    if (p.pid && p.exitCode === null && p.signalCode === null) {
      p.kill('SIGTERM');
      await Promise.race([new Promise((r) => p.once('exit', r)), new Promise((r) => setTimeout(r, 5000))]);
      if (p.exitCode === null && p.signalCode === null)
        try {
          process.kill(p.pid, 'SIGKILL');
        } catch {
          /* gone */
        }
    }
}

/** A RabbitMQ for Cinder's RPC: its own epmd, node name, ports and directories. */
async function startRabbit(dir: string, procs: ChildProcess[]): Promise<string> {
  const [amqp, dist, epmd] = [await freePort(), await freePort(), await freePort()];
  const rdir = join(dir, 'rabbit');
  mkdirSync(rdir, { recursive: true });
  writeFileSync(join(rdir, 'enabled_plugins'), '[].\n');
  const env = {
    HOME: rdir,
    ERL_EPMD_PORT: String(epmd),
    ERL_EPMD_ADDRESS: '127.0.0.1',
  };
  procs.push(start(dir, 'epmd', '/usr/bin/epmd', ['-port', String(epmd), '-address', '127.0.0.1'], env));
  procs.push(
    start(dir, 'rabbitmq', RABBIT, [], {
      ...env,
      RABBITMQ_NODENAME: `twopass-${amqp}@localhost`,
      RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
      RABBITMQ_NODE_PORT: String(amqp),
      RABBITMQ_DIST_PORT: String(dist),
      RABBITMQ_MNESIA_BASE: join(rdir, 'mnesia'),
      RABBITMQ_LOG_BASE: join(rdir, 'log'),
      RABBITMQ_CONFIG_FILE: join(rdir, 'rabbitmq'),
      RABBITMQ_ADVANCED_CONFIG_FILE: join(rdir, 'advanced.config'),
      RABBITMQ_ENABLED_PLUGINS_FILE: join(rdir, 'enabled_plugins'),
      RABBITMQ_PID_FILE: join(rdir, 'rabbit.pid'),
      RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS: '-kernel inet_dist_use_interface {127,0,0,1}',
    }),
  );
  // AMQP answers once the broker is up
  await until('RabbitMQ', 90_000, async () => {
    const net = await import('node:net');
    return new Promise<true | undefined>((resolve) => {
      const s = net.connect(amqp, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(undefined));
    });
  });
  return `rabbit://guest:guest@127.0.0.1:${amqp}/`;
}

/**
 * A real Cinder for `os`'s Keystone and MariaDB. `maxLimit` sets osapi_max_limit (Cinder's
 * default is 1000; a small one lets a test reach the cap with a few volumes).
 */
export async function startCinder(os: RealOpenStack, opts: { maxLimit?: number } = {}): Promise<RealCinder> {
  const maxLimit = opts.maxLimit ?? 1000;
  const dir = mkdtempSync(join(os.dir, 'cinder-'));
  const procs: ChildProcess[] = [];
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const tag = String(port);
  const dbName = `cinder_${tag}`;
  const ks = new URL(os.authUrl).origin;
  const admin = await passwordToken(os.authUrl, 'admin', os.admin.password, 'admin');
  const made: { what: string; id: string }[] = [];
  const stop = async () => {
    await stopAll(procs);
    // the catalog and the database as they were: another file's Cinder is not this one
    const token = await passwordToken(os.authUrl, 'admin', os.admin.password, 'admin').catch(() => undefined);
    if (token) for (const m of made.reverse()) await call('DELETE', `${os.authUrl}/${m.what}/${m.id}`, token);
    spawnSync(PY, [
      '-c',
      `import pymysql; c = pymysql.connect(host='127.0.0.1', port=${os.db.port}, user='${os.db.user}', password='${os.db.password}'); c.cursor().execute('DROP DATABASE IF EXISTS ${dbName}')`,
    ]);
    if (!process.env.TWOPASS_KEEP_OPENSTACK_DIR) rmSync(dir, { recursive: true, force: true });
  };
  try {
    const id = async (what: string, body: Record<string, unknown>, key: string) => {
      const made1 = ((await ok('POST', `${os.authUrl}/${what}`, admin, body))[key] as { id: string }).id;
      made.push({ what, id: made1 });
      return made1;
    };
    const role = async (name: string) =>
      ((await ok('GET', `${os.authUrl}/roles?name=${name}`, admin)).roles as { id: string }[])[0]!.id;
    const service = (
      (await ok('GET', `${os.authUrl}/projects?name=service`, admin)).projects as { id: string }[]
    )[0]!.id;
    const user = `cinder-${tag}`;
    const userId = await id(
      'users',
      { user: { name: user, password: 'cinder-pw', domain_id: 'default' } },
      'user',
    );
    await ok('PUT', `${os.authUrl}/projects/${service}/users/${userId}/roles/${await role('admin')}`, admin);
    // Cinder's catalog types: block-storage (the service-types authority), volumev3 (older clients)
    for (const type of ['block-storage', 'volumev3']) {
      const svc = await id('services', { service: { name: `cinder-${type}-${tag}`, type } }, 'service');
      for (const iface of ['public', 'internal', 'admin'])
        await ok('POST', `${os.authUrl}/endpoints`, admin, {
          endpoint: {
            service_id: svc,
            interface: iface,
            url: `${url}/v3/%(project_id)s`,
            region_id: os.region,
          },
        });
    }
    spawnSync(PY, [
      '-c',
      `import pymysql; c = pymysql.connect(host='127.0.0.1', port=${os.db.port}, user='${os.db.user}', password='${os.db.password}'); c.cursor().execute('CREATE DATABASE ${dbName}')`,
    ]);
    const transport = await startRabbit(dir, procs);
    for (const d of ['state', 'lock', 'log']) mkdirSync(join(dir, d));
    writeFileSync(join(dir, 'api-paste.ini'), PASTE);
    writeFileSync(join(dir, 'resource_filters.json'), JSON.stringify(RESOURCE_FILTERS));
    const conf = join(dir, 'cinder.conf');
    writeFileSync(
      conf,
      [
        '[DEFAULT]',
        `transport_url = ${transport}`,
        'auth_strategy = keystone',
        'enabled_backends = fake',
        `host = twopass-${tag}`,
        'osapi_volume_listen = 127.0.0.1',
        `osapi_volume_listen_port = ${port}`,
        'osapi_volume_workers = 1',
        `osapi_max_limit = ${maxLimit}`,
        `api_paste_config = ${join(dir, 'api-paste.ini')}`,
        `resource_query_filters_file = ${join(dir, 'resource_filters.json')}`,
        `state_path = ${join(dir, 'state')}`,
        `log_dir = ${join(dir, 'log')}`,
        // the fake driver reports its capacity once a minute: the scheduler must not wait for it
        'periodic_interval = 5',
        '[database]',
        `connection = mysql+pymysql://${os.db.user}:${os.db.password}@127.0.0.1:${os.db.port}/${dbName}`,
        '[keystone_authtoken]',
        `www_authenticate_uri = ${ks}`,
        `auth_url = ${ks}`,
        'auth_type = password',
        'project_domain_name = Default',
        'user_domain_name = Default',
        'project_name = service',
        `username = ${user}`,
        'password = cinder-pw',
        'token_cache_time = -1',
        '[fake]',
        'volume_driver = cinder.tests.fake_driver.FakeLoggingVolumeDriver',
        'volume_backend_name = fake',
        '[oslo_concurrency]',
        `lock_path = ${join(dir, 'lock')}`,
        '[coordination]',
        `backend_url = file://${join(dir, 'state')}`,
        '',
      ].join('\n'),
    );
    const py = (mod: string, argv: string[]) =>
      `import sys; from ${mod} import main; sys.argv=${JSON.stringify(argv)}; sys.exit(main())`;
    run(dir, 'cinder-manage', PY, [
      '-c',
      py('cinder.cmd.manage', ['cinder-manage', '--config-file', conf, 'db', 'sync']),
    ]);
    const scheduler = start(dir, 'cinder-scheduler', PY, [
      '-c',
      py('cinder.cmd.scheduler', ['cinder-scheduler', '--config-file', conf]),
    ]);
    procs.push(scheduler);
    procs.push(
      start(dir, 'cinder-volume', PY, [
        '-c',
        py('cinder.cmd.volume', ['cinder-volume', '--config-file', conf]),
      ]),
    );
    procs.push(
      start(dir, 'cinder-api', PY, ['-c', py('cinder.cmd.api', ['cinder-api', '--config-file', conf])]),
    );
    const adminProject = (
      (await ok('GET', `${os.authUrl}/projects?name=admin`, admin)).projects as { id: string }[]
    )[0]!.id;
    await until('Cinder API', 120_000, async () =>
      (await call('GET', `${url}/v3/${adminProject}/volumes?limit=1`, admin)).status === 200
        ? true
        : undefined,
    );
    // the volume service up and reporting to the scheduler: a volume then becomes available
    await until('Cinder volume service', 120_000, async () => {
      const s = (await ok('GET', `${url}/v3/${adminProject}/os-services`, admin)).services as {
        binary: string;
        state: string;
      }[];
      return s.some((x) => x.binary === 'cinder-volume' && x.state === 'up') &&
        s.some((x) => x.binary === 'cinder-scheduler' && x.state === 'up')
        ? true
        : undefined;
    });
    return { url, maxLimit, schedulerPid: scheduler.pid!, dir, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
