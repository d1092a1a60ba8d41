/**
 * startOpenStack(): a real Keystone (identity v3) and Neutron (networking v2.0) from
 * Debian's packages, with MariaDB, on free loopback ports and a data directory of its
 * own (../shared/reference/openstack.md). It provisions what the tests use: the
 * `network` service in the catalog, a project `k8s-a` with a user and an application
 * credential, a tenant network and subnet, an external network and a router so that
 * floating IPs can be associated. Every process is stopped by PID, also when the test
 * process dies.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../cluster/cluster.ts';
import { track } from '../helpers/children.ts';

export type RealOpenStack = Readonly<{
  authUrl: string;
  neutronUrl: string;
  region: string;
  /** The project the lbaas-ports tests own. */
  project: { id: string; name: string };
  user: { id: string; name: string; password: string };
  appCred: { id: string; secret: string };
  admin: { password: string };
  /** The tenant network and subnet ports are created on. */
  networkId: string;
  subnetId: string;
  externalNetworkId: string;
  /** Octavia's API (the no-op provider, completed by test/openstack/octavia-provider.py), where installed. */
  octaviaUrl?: string;
  /** The provider loop's process: SIGSTOP holds every load balancer in its PENDING_* state, SIGCONT lets it go on. */
  octaviaProviderPid?: number;
  /** MariaDB on loopback: the account every service uses (it may create databases). */
  db: { port: number; user: string; password: string };
  dir: string;
  startedMs: number;
}>;

const PY = '/usr/bin/python3';

/** Whether Debian's Octavia (API, driver agent, database migrations) is installed. */
export function octaviaInstalled(): boolean {
  return spawnSync(PY, ['-c', 'import octavia.api.app, octavia_lib'], { stdio: 'ignore' }).status === 0;
}

/** Whether Debian's Keystone, Neutron, uwsgi and MariaDB are installed. */
export function openStackInstalled(): boolean {
  if (!['/usr/bin/keystone-manage', '/usr/bin/uwsgi', '/usr/sbin/mariadbd', PY].every((p) => existsSync(p)))
    return false;
  return spawnSync(PY, ['-c', 'import neutron, keystone, pymysql'], { stdio: 'ignore' }).status === 0;
}

export function start(
  dir: string,
  name: string,
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
): ChildProcess {
  const out = openSync(join(dir, `${name}.out`), 'a');
  const c = spawn(cmd, args, { stdio: ['ignore', out, out], env: { ...process.env, ...env } });
  track(c);
  return c;
}

export function run(
  dir: string,
  name: string,
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
): void {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env } });
  writeFileSync(join(dir, `${name}.log`), `${r.stdout ?? ''}\n${r.stderr ?? ''}`);
  if (r.status !== 0) throw new Error(`${name} failed (exit ${r.status}): ${(r.stderr ?? '').slice(-800)}`);
}

export async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

export type Json = Record<string, unknown>;

export async function call(
  method: string,
  url: string,
  token: string | undefined,
  body?: unknown,
): Promise<{ status: number; body: Json; token?: string }> {
  const res = await fetch(url, {
    method,
    headers: {
      accept: 'application/json',
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(token ? { 'x-auth-token': token } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let parsed: Json = {};
  try {
    parsed = text ? (JSON.parse(text) as Json) : {};
  } catch {
    parsed = { text };
  }
  const t = res.headers.get('x-subject-token');
  return { status: res.status, body: parsed, ...(t ? { token: t } : {}) };
}

export async function ok(
  method: string,
  url: string,
  token: string | undefined,
  body?: unknown,
): Promise<Json> {
  const r = await call(method, url, token, body);
  if (r.status >= 300)
    throw new Error(`${method} ${url}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
  return r.body;
}

export async function passwordToken(
  authUrl: string,
  user: string,
  password: string,
  project: string,
): Promise<string> {
  const r = await call('POST', `${authUrl}/auth/tokens`, undefined, {
    auth: {
      identity: {
        methods: ['password'],
        password: { user: { name: user, domain: { id: 'default' }, password } },
      },
      scope: { project: { name: project, domain: { id: 'default' } } },
    },
  });
  if (r.status !== 201 || !r.token) throw new Error(`token for ${user}: ${r.status}`);
  return r.token;
}

export async function startOpenStack(): Promise<RealOpenStack & { stop: () => Promise<void> }> {
  const t0 = Date.now();
  const dir = mkdtempSync(join(tmpdir(), 'twopass-openstack-'));
  const [dbPort, ksPort, nPort, oPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const procs: ChildProcess[] = [];
  const stop = async () => {
    for (const p of procs.reverse())
      if (p.pid && p.exitCode === null) {
        p.kill('SIGTERM');
        await Promise.race([new Promise((r) => p.once('exit', r)), new Promise((r) => setTimeout(r, 5000))]);
        if (p.exitCode === null)
          try {
            process.kill(p.pid, 'SIGKILL');
          } catch {
            /* gone */
          }
      }
    if (!process.env.TWOPASS_KEEP_OPENSTACK_DIR) rmSync(dir, { recursive: true, force: true });
  };
  try {
    // MariaDB, a data directory of its own.
    run(dir, 'mariadb-install-db', 'mariadb-install-db', [
      '--no-defaults',
      `--datadir=${join(dir, 'db')}`,
      '--user=root',
      '--auth-root-authentication-method=socket',
    ]);
    const sock = join(dir, 'db.sock');
    procs.push(
      start(dir, 'mariadbd', '/usr/sbin/mariadbd', [
        '--no-defaults',
        `--datadir=${join(dir, 'db')}`,
        `--socket=${sock}`,
        '--bind-address=127.0.0.1',
        `--port=${dbPort}`,
        '--user=root',
        '--skip-name-resolve',
        '--innodb-buffer-pool-size=64M',
        '--innodb-flush-log-at-trx-commit=2',
      ]),
    );
    await until('MariaDB', 60_000, async () =>
      spawnSync('mariadb', ['-S', sock, '-u', 'root', '-e', 'SELECT 1'], { stdio: 'ignore' }).status === 0
        ? true
        : undefined,
    );
    run(dir, 'mariadb-setup', 'mariadb', [
      '-S',
      sock,
      '-u',
      'root',
      '-e',
      "CREATE DATABASE keystone; CREATE DATABASE neutron; CREATE DATABASE octavia; CREATE USER 'twopass'@'127.0.0.1' IDENTIFIED BY 'db-pw'; GRANT ALL ON *.* TO 'twopass'@'127.0.0.1'; FLUSH PRIVILEGES;",
    ]);
    const db = (name: string) => `mysql+pymysql://twopass:db-pw@127.0.0.1:${dbPort}/${name}`;

    // Keystone, served by uwsgi.
    const authUrl = `http://127.0.0.1:${ksPort}/v3`;
    const adminPw = 'admin-pw';
    mkdirSync(join(dir, 'fernet-keys'));
    mkdirSync(join(dir, 'credential-keys'));
    const ks = join(dir, 'keystone.conf');
    writeFileSync(
      ks,
      `[DEFAULT]\nlog_file = ${join(dir, 'keystone.log')}\n[database]\nconnection = ${db('keystone')}\n[token]\nprovider = fernet\nexpiration = 3600\n[fernet_tokens]\nkey_repository = ${join(dir, 'fernet-keys')}\n[credential]\nkey_repository = ${join(dir, 'credential-keys')}\n[identity]\npassword_hash_rounds = 4\n`,
    );
    const km = (step: string, ...args: string[]) =>
      run(dir, `keystone-${step}`, '/usr/bin/keystone-manage', ['--config-file', ks, step, ...args]);
    km('fernet_setup', '--keystone-user', 'root', '--keystone-group', 'root');
    km('credential_setup', '--keystone-user', 'root', '--keystone-group', 'root');
    km('db_sync');
    km(
      'bootstrap',
      '--bootstrap-password',
      adminPw,
      '--bootstrap-region-id',
      'RegionOne',
      '--bootstrap-admin-url',
      `${authUrl}/`,
      '--bootstrap-internal-url',
      `${authUrl}/`,
      '--bootstrap-public-url',
      `${authUrl}/`,
    );
    procs.push(
      start(
        dir,
        'keystone',
        '/usr/bin/uwsgi',
        [
          '--plugin',
          'python3',
          '--http-socket',
          `127.0.0.1:${ksPort}`,
          '--wsgi-file',
          '/usr/bin/keystone-wsgi-public',
          '--master',
          '--processes',
          '2',
          '--threads',
          '1',
          '--add-header',
          'Connection: close',
          // uwsgi's master reloads on SIGTERM unless told to stop
          '--die-on-term',
        ],
        { OS_KEYSTONE_CONFIG_FILES: ks },
      ),
    );
    const admin = await until('Keystone', 60_000, () => passwordToken(authUrl, 'admin', adminPw, 'admin'));

    // The catalog: Neutron's service user and endpoints; the tests' project, user and credential.
    const neutronUrl = `http://127.0.0.1:${nPort}`;
    const roleId = async (name: string) =>
      ((await ok('GET', `${authUrl}/roles?name=${name}`, admin)).roles as { id: string }[])[0]!.id;
    const project = async (name: string) =>
      (
        (await ok('POST', `${authUrl}/projects`, admin, { project: { name, domain_id: 'default' } }))
          .project as {
          id: string;
        }
      ).id;
    const user = async (name: string, password: string) =>
      (
        (await ok('POST', `${authUrl}/users`, admin, { user: { name, password, domain_id: 'default' } }))
          .user as {
          id: string;
        }
      ).id;
    const service = await project('service');
    const neutronUser = await user('neutron', 'neutron-pw');
    await ok(
      'PUT',
      `${authUrl}/projects/${service}/users/${neutronUser}/roles/${await roleId('admin')}`,
      admin,
    );
    const svc = (
      (await ok('POST', `${authUrl}/services`, admin, { service: { name: 'neutron', type: 'network' } }))
        .service as {
        id: string;
      }
    ).id;
    for (const iface of ['public', 'internal', 'admin'])
      await ok('POST', `${authUrl}/endpoints`, admin, {
        endpoint: { service_id: svc, interface: iface, url: neutronUrl, region_id: 'RegionOne' },
      });
    const projectA = await project('k8s-a');
    const userPw = 'twopass-pw';
    const userA = await user('twopass', userPw);
    await ok('PUT', `${authUrl}/projects/${projectA}/users/${userA}/roles/${await roleId('member')}`, admin);
    // Octavia's default policy asks for load-balancer_member; given before the application
    // credential is made, which takes the roles the user has then
    const octavia = octaviaInstalled();
    if (octavia) {
      const lbRole = (
        (await ok('POST', `${authUrl}/roles`, admin, { role: { name: 'load-balancer_member' } })).role as {
          id: string;
        }
      ).id;
      await ok('PUT', `${authUrl}/projects/${projectA}/users/${userA}/roles/${lbRole}`, admin);
    }
    const userToken = await passwordToken(authUrl, 'twopass', userPw, 'k8s-a');
    const ac = (
      await ok('POST', `${authUrl}/users/${userA}/application_credentials`, userToken, {
        application_credential: { name: 'twopass-tests' },
      })
    ).application_credential as { id: string; secret: string };

    // Neutron: ML2 with no agents, fake messaging, migrations, then the API server.
    const nconf = join(dir, 'neutron.conf');
    mkdirSync(join(dir, 'neutron-state'));
    mkdirSync(join(dir, 'lock'));
    run(dir, 'copy-paste', 'cp', ['/usr/lib/python3/dist-packages/neutron/tests/etc/api-paste.ini', dir]);
    writeFileSync(
      nconf,
      [
        '[DEFAULT]',
        'bind_host = 127.0.0.1',
        `bind_port = ${nPort}`,
        'core_plugin = ml2',
        'service_plugins = router,tag,revisions',
        'transport_url = fake://',
        'api_workers = 0',
        'rpc_workers = 0',
        'rpc_state_report_workers = 0',
        'notify_nova_on_port_status_changes = false',
        'notify_nova_on_port_data_changes = false',
        'auth_strategy = keystone',
        `api_paste_config = ${join(dir, 'api-paste.ini')}`,
        `log_file = ${join(dir, 'neutron.log')}`,
        `state_path = ${join(dir, 'neutron-state')}`,
        '[database]',
        `connection = ${db('neutron')}`,
        '[keystone_authtoken]',
        `www_authenticate_uri = http://127.0.0.1:${ksPort}`,
        `auth_url = http://127.0.0.1:${ksPort}`,
        'auth_type = password',
        'project_domain_name = Default',
        'user_domain_name = Default',
        'project_name = service',
        'username = neutron',
        'password = neutron-pw',
        // validate every token at Keystone: a revoked token is refused at once, as the contract expects
        'token_cache_time = -1',
        '[quotas]',
        'quota_port = -1',
        'quota_network = -1',
        'quota_subnet = -1',
        'quota_router = -1',
        'quota_floatingip = -1',
        '[ml2]',
        'type_drivers = flat,vxlan',
        'tenant_network_types = vxlan',
        'mechanism_drivers = openvswitch',
        // ch-k8s-lbaas makes its ports with port_security_enabled: false, which needs this driver
        'extension_drivers = port_security',
        '[ml2_type_flat]',
        'flat_networks = public',
        '[ml2_type_vxlan]',
        'vni_ranges = 1:1000',
        '[oslo_concurrency]',
        `lock_path = ${join(dir, 'lock')}`,
        '',
      ].join('\n'),
    );
    const py = (mod: string, fn: string, argv: string[]) =>
      `import sys; from ${mod} import ${fn}; sys.argv=${JSON.stringify(argv)}; sys.exit(${fn}())`;
    run(dir, 'neutron-db-manage', PY, [
      '-c',
      py('neutron.db.migration.cli', 'main', [
        'neutron-db-manage',
        '--config-file',
        nconf,
        'upgrade',
        'heads',
      ]),
    ]);
    procs.push(
      start(dir, 'neutron-server', PY, [
        '-c',
        py('neutron.cmd.eventlet.server', 'main', ['neutron-server', '--config-file', nconf]),
      ]),
    );
    const nAdmin = await passwordToken(authUrl, 'admin', adminPw, 'admin');
    await until('Neutron', 120_000, async () =>
      (await call('GET', `${neutronUrl}/v2.0/ports?limit=1`, nAdmin)).status === 200 ? true : undefined,
    );

    // The networks: an external `public` (admin), the project's own, and a router between them.
    const net = async (token: string, body: Json) =>
      ((await ok('POST', `${neutronUrl}/v2.0/networks`, token, { network: body })).network as { id: string })
        .id;
    const subnet = async (token: string, network_id: string, cidr: string) =>
      (
        (
          await ok('POST', `${neutronUrl}/v2.0/subnets`, token, {
            subnet: { network_id, cidr, ip_version: 4, enable_dhcp: false },
          })
        ).subnet as { id: string }
      ).id;
    const external = await net(nAdmin, {
      name: 'public',
      'router:external': true,
      'provider:network_type': 'flat',
      'provider:physical_network': 'public',
    });
    // /20s: room for the deleting-run benchmark's 1,000 ports and floating IPs
    await subnet(nAdmin, external, '198.18.0.0/20');
    const networkId = await net(userToken, { name: 'k8s-a-net' });
    const subnetId = await subnet(userToken, networkId, '10.1.0.0/20');
    const router = (
      (
        await ok('POST', `${neutronUrl}/v2.0/routers`, userToken, {
          router: { name: 'k8s-a-router', external_gateway_info: { network_id: external } },
        })
      ).router as { id: string }
    ).id;
    await ok('PUT', `${neutronUrl}/v2.0/routers/${router}/add_router_interface`, userToken, {
      subnet_id: subnetId,
    });
    const octaviaStarted = octavia
      ? await startOctavia({
          dir,
          port: oPort,
          ksPort,
          authUrl,
          admin,
          db: db('octavia'),
          procs,
        })
      : undefined;
    return {
      authUrl,
      neutronUrl,
      ...(octaviaStarted
        ? { octaviaUrl: octaviaStarted.url, octaviaProviderPid: octaviaStarted.providerPid }
        : {}),
      region: 'RegionOne',
      project: { id: projectA, name: 'k8s-a' },
      user: { id: userA, name: 'twopass', password: userPw },
      appCred: { id: ac.id, secret: ac.secret },
      admin: { password: adminPw },
      networkId,
      subnetId,
      externalNetworkId: external,
      db: { port: dbPort, user: 'twopass', password: 'db-pw' },
      dir,
      startedMs: Date.now() - t0,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * Octavia's API with the no-op provider (no amphorae, no message queue), its driver agent,
 * and test/openstack/octavia-provider.py, which finishes what the provider was asked (a
 * load balancer becomes ACTIVE, a deleted one DELETED) through the agent's status socket.
 * The load-balancer service goes in the catalog.
 */
async function startOctavia(o: {
  dir: string;
  port: number;
  ksPort: number;
  authUrl: string;
  admin: string;
  db: string;
  procs: ChildProcess[];
}): Promise<{ url: string; providerPid: number }> {
  const { dir, authUrl, admin } = o;
  const url = `http://127.0.0.1:${o.port}`;
  const id = async (what: string, body: Json, key: string) =>
    ((await ok('POST', `${authUrl}/${what}`, admin, body))[key] as { id: string }).id;
  const role = async (name: string) =>
    ((await ok('GET', `${authUrl}/roles?name=${name}`, admin)).roles as { id: string }[])[0]!.id;
  const service = (
    (await ok('GET', `${authUrl}/projects?name=service`, admin)).projects as { id: string }[]
  )[0]!.id;
  const octaviaUser = await id(
    'users',
    { user: { name: 'octavia', password: 'octavia-pw', domain_id: 'default' } },
    'user',
  );
  await ok('PUT', `${authUrl}/projects/${service}/users/${octaviaUser}/roles/${await role('admin')}`, admin);
  const svc = await id('services', { service: { name: 'octavia', type: 'load-balancer' } }, 'service');
  for (const iface of ['public', 'internal', 'admin'])
    await ok('POST', `${authUrl}/endpoints`, admin, {
      endpoint: { service_id: svc, interface: iface, url, region_id: 'RegionOne' },
    });
  const sock = join(dir, 'octavia-status.sock');
  const conf = join(dir, 'octavia.conf');
  writeFileSync(
    conf,
    [
      '[DEFAULT]',
      'transport_url = fake://',
      `log_file = ${join(dir, 'octavia.log')}`,
      '[api_settings]',
      'bind_host = 127.0.0.1',
      `bind_port = ${o.port}`,
      'auth_strategy = keystone',
      'enabled_provider_drivers = noop_driver:the no-op provider',
      'default_provider_driver = noop_driver',
      '[database]',
      `connection = ${o.db}`,
      '[controller_worker]',
      // Neutron's own: a VIP port given by ID (cloud-provider-openstack's port-id) is read from it
      'network_driver = allowed_address_pairs_driver',
      'compute_driver = compute_noop_driver',
      'amphora_driver = amphora_noop_driver',
      '[driver_agent]',
      `status_socket_path = ${sock}`,
      `stats_socket_path = ${sock}.stats`,
      `get_socket_path = ${sock}.get`,
      '[keystone_authtoken]',
      `www_authenticate_uri = http://127.0.0.1:${o.ksPort}`,
      `auth_url = http://127.0.0.1:${o.ksPort}`,
      'auth_type = password',
      'project_domain_name = Default',
      'user_domain_name = Default',
      'project_name = service',
      'username = octavia',
      'password = octavia-pw',
      'token_cache_time = -1',
      '[service_auth]',
      `auth_url = http://127.0.0.1:${o.ksPort}`,
      'auth_type = password',
      'project_domain_name = Default',
      'user_domain_name = Default',
      'project_name = service',
      'username = octavia',
      'password = octavia-pw',
      '[oslo_concurrency]',
      `lock_path = ${join(dir, 'lock')}`,
      '',
    ].join('\n'),
  );
  run(dir, 'octavia-db-manage', PY, ['/usr/bin/octavia-db-manage', '--config-file', conf, 'upgrade', 'head']);
  o.procs.push(
    start(dir, 'octavia-driver-agent', PY, ['/usr/bin/octavia-driver-agent', '--config-file', conf]),
  );
  o.procs.push(start(dir, 'octavia-api', PY, ['/usr/bin/octavia-api', '--config-file', conf]));
  const provider = start(dir, 'octavia-provider', PY, [
    new URL('./octavia-provider.py', import.meta.url).pathname,
    o.db.replace('mysql+pymysql://', 'mysql://'),
    sock,
  ]);
  o.procs.push(provider);
  await until('Octavia', 120_000, async () =>
    (await call('GET', `${url}/v2/lbaas/loadbalancers?limit=1`, admin)).status === 200 ? true : undefined,
  );
  return { url, providerPid: provider.pid! };
}

/** The `[Global]` section of a cloud-provider-openstack cloud.conf: the project's application credential. */
export const cloudConfGlobal = (os: RealOpenStack): string[] => [
  '[Global]',
  `auth-url = ${os.authUrl}`,
  `application-credential-id = ${os.appCred.id}`,
  `application-credential-secret = ${os.appCred.secret}`,
  `region = ${os.region}`,
];

/** A clouds.yaml in `dir` with the project's application credential as cloud `real`; the environment that names it. */
export function appCredCloud(os: RealOpenStack, dir: string): Record<string, string> {
  writeFileSync(
    join(dir, 'clouds.yaml'),
    `clouds:\n  real:\n    auth_type: v3applicationcredential\n    region_name: ${os.region}\n    interface: public\n    auth:\n      auth_url: ${os.authUrl}\n      application_credential_id: ${os.appCred.id}\n      application_credential_secret: ${os.appCred.secret}\n`,
  );
  return { OS_CLOUD: 'real', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') };
}

/** The real OpenStack that `npm test` started (TWOPASS_TEST_OPENSTACK), or undefined. */
export function realOpenStack(): RealOpenStack | undefined {
  if (process.env.TWOPASS_PHASE === 'early')
    throw new Error(
      'the early phase (TWOPASS_PHASE=early) has no real servers: this test file needs one, so test/run-tests.ts must not count it as early (see REAL_MARKERS)',
    );
  const j = process.env.TWOPASS_TEST_OPENSTACK;
  return j ? (JSON.parse(j) as RealOpenStack) : undefined;
}
