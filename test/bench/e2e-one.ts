/**
 * One end-to-end measurement against a running fake: twopass, the naive cleaner, or the
 * listing floor. Each variant imports only what it uses (dynamic imports), so that a variant's peak RSS
 * is its own: the floor does not pay for the functions' modules.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { Pool } from 'undici';
import type { KubeObject } from '../../shared/kube/resources.ts';
import { testTime } from '../helpers/time.ts';
import { arg, peakRssMiB } from './common.ts';

const fn = arg('fn');
const variant = arg('variant');
const server = arg('server');
const pageSize = Number(arg('page-size', '500'));
const env = JSON.parse(arg('env', '{}')) as Record<string, string>;
const headers = JSON.parse(arg('headers', '{}')) as Record<string, string>;
const insecure = arg('insecure', 'false') === 'true';
// a run that deletes: --apply true, with the state of an earlier run (--state DIR) and --grace-ms
const apply = arg('apply', 'false') === 'true';
const stateDir = arg('state', '');
const graceMs = arg('grace-ms', '');
const opts = { server, headers, ...(insecure ? { tls: { rejectUnauthorized: false } } : {}) };

async function floor(paths: string[], accept: string[]): Promise<number> {
  const pool = new Pool(server, {
    connections: 1,
    ...(insecure ? { connect: { rejectUnauthorized: false } } : {}),
  });
  let items = 0;
  for (const [i, path] of paths.entries()) {
    let cont: string | undefined;
    do {
      const q = `?limit=${pageSize}${cont ? `&continue=${encodeURIComponent(cont)}` : ''}`;
      // the same requests as twopass makes: gzip asked for, and decoded when given
      const r = await pool.request({
        method: 'GET',
        path: path + q,
        headers: { ...headers, accept: accept[i] ?? 'application/json', 'accept-encoding': 'gzip' },
      });
      const raw = Buffer.from(await r.body.arrayBuffer());
      const text = (r.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8');
      const body = JSON.parse(text) as {
        items: unknown[] | null;
        metadata: { continue?: string };
      };
      items += body.items?.length ?? 0;
      cont = body.metadata.continue || undefined;
    } while (cont);
  }
  await pool.close();
  return items;
}

const META = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1';
const t = performance.now();
let detail: unknown;
if (variant === 'twopass') {
  const { FUNCTIONS } = await import('../../functions/index.ts');
  const { resolveConfig } = await import('../../shared/config.ts');
  const { createLogger } = await import('../../shared/log/logger.ts');
  const { runFunction } = await import('../../shared/runtime/wire.ts');
  const entry = FUNCTIONS.find((f) => f.name === fn)!;
  const dir = stateDir || mkdtempSync(join(tmpdir(), 'twopass-bench-'));
  const cfg = resolveConfig(
    {
      pageSize,
      // a grace below the floor (the peer's deleting run has grace 0)
      ...(graceMs ? { allowShortGrace: true } : {}),
      functions: {
        [fn]: {
          enabled: true,
          maxEvidenceDropPercent: 100,
          ...(graceMs ? { grace: Number(graceMs), minAge: Number(graceMs) } : {}),
          settings: fn === 'lbaas-ports' ? { projectId: 'project-a' } : {},
        },
      },
    },
    'bench',
    { state: `file:${dir}` },
  );
  const r = await runFunction(
    entry,
    cfg,
    {
      time: testTime(),
      log: createLogger({ output: 'json', level: 'silent' }),
      kubeOptions: opts,
      processEnv: env,
    },
    { apply, record: true },
  );
  detail = {
    exit: r.exitCode,
    targets: r.summary?.targets,
    newCandidates: r.summary?.newCandidates,
    deleted: r.deleted.length,
  };
} else if (variant === 'naive') {
  // what the DANM cleaner does: list the targets, then GET each one's pod by name
  const { KubeHttpClient } = await import('../../shared/kube/client.ts');
  const { IPPOOLS } = await import('../../functions/whereabouts-ips/model.ts');
  const { PODS, SERVICES } = await import('../../shared/kube/resources.ts');
  const { R } = await import('../../shared/sandbox/scenarios/danm.ts');
  const kube = new KubeHttpClient({ ...opts, pageSize, time: testTime() });
  let gets = 0;
  if (fn === 'danm-endpoints') {
    for (const ep of (await kube.listAll(R.danmeps, {})).items) {
      const s = ep.spec as { Pod: string };
      await kube.get(PODS, ep.metadata.namespace, s.Pod);
      gets++;
    }
  } else if (fn === 'whereabouts-ips') {
    for (const pool of (await kube.listAll(IPPOOLS, {})).items) {
      for (const a of Object.values(
        (pool.spec as { allocations: Record<string, { podref: string }> }).allocations,
      )) {
        const [ns, name] = a.podref.split('/') as [string, string];
        await kube.get(PODS, ns, name);
        gets++;
      }
    }
  } else {
    for (const s of (await kube.listAll(SERVICES, {})).items as KubeObject[]) void s;
  }
  await kube.close();
  detail = { gets };
} else {
  const lists: Record<string, [string[], string[]]> = {
    'danm-endpoints': [
      ['/apis/danm.k8s.io/v1/danmnets', '/apis/danm.k8s.io/v1/danmeps', '/api/v1/pods'],
      ['application/json', 'application/json', META],
    ],
    'whereabouts-ips': [
      ['/apis/whereabouts.cni.cncf.io/v1alpha1/ippools', '/api/v1/pods'],
      ['application/json', META],
    ],
    // and the ch-k8s-lbaas controller: its Deployment and its pods
    'lbaas-ports': [
      [
        '/api/v1/services',
        '/apis/apps/v1/namespaces/kube-system/deployments',
        '/api/v1/namespaces/kube-system/pods',
      ],
      ['application/json', 'application/json', 'application/json'],
    ],
  };
  const [paths, accept] = lists[fn]!;
  let items = 0;
  if (fn === 'lbaas-ports') {
    // the same Neutron lists twopass makes (tagged ports, tagged FIPs, all project ports), token included
    const { request } = await import('undici');
    const cloud = (await import('../../shared/openstack/config.ts')).loadCloudConfig(env);
    const auth = await request(`${cloud.authUrl}/auth/tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        auth: {
          identity: {
            methods: ['application_credential'],
            application_credential: {
              id: cloud.applicationCredentialId,
              secret: cloud.applicationCredentialSecret,
            },
          },
        },
      }),
    });
    const token = String(auth.headers['x-subject-token']);
    const catalog = (await auth.body.json()) as {
      token: { catalog: { type: string; endpoints: { url: string }[] }[] };
    };
    const base = `${catalog.token.catalog.find((c) => c.type === 'network')!.endpoints[0]!.url}/v2.0`;
    const pool = new Pool(new URL(base).origin, { connections: 1 });
    for (const [col, q] of [
      [
        'ports',
        `tags=${encodeURIComponent('cah-loadbalancer.k8s.cloudandheat.com/managed')}&project_id=project-a`,
      ],
      [
        'floatingips',
        `tags=${encodeURIComponent('cah-loadbalancer.k8s.cloudandheat.com/managed')}&project_id=project-a`,
      ],
      ['ports', 'project_id=project-a'],
    ] as const) {
      let url: string | undefined = `${base}/${col}?${q}&limit=${pageSize}`;
      while (url) {
        const u = new URL(url);
        const r = await pool.request({
          method: 'GET',
          path: u.pathname + u.search,
          headers: { 'x-auth-token': token },
        });
        const body = JSON.parse(await r.body.text()) as Record<string, unknown>;
        items += (body[col] as unknown[]).length;
        url = ((body[`${col}_links`] as { rel: string; href: string }[] | undefined) ?? []).find(
          (l) => l.rel === 'next',
        )?.href;
      }
    }
    await pool.close();
  }
  detail = { items: items + (await floor(paths, accept)) };
}
console.log(JSON.stringify({ fn, variant, ms: performance.now() - t, peakRssMiB: peakRssMiB(), detail }));
