/**
 * The image, built for real from infra/Dockerfile (test/node/image.sh: buildah, on a local
 * stand-in for node:24-bookworm-slim) and run by runc as the manifests run it: as UID
 * 65532, on a read-only root with only /tmp writable, no capabilities. It asserts what the
 * image promises. Without buildah and runc (Debian's packages; test/node/build.sh installs
 * them) the suite is SKIPPED, and said so; TWOPASS_REQUIRE_NODE=1 (CI) makes that a failure.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

const ROOT = new URL('../../', import.meta.url).pathname;
const IMAGE = 'localhost/twopass:test';
const have = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
const off = process.env.TWOPASS_NO_NODE === '1';
const tools = !off && have('buildah') && have('runc') && process.getuid?.() === 0;
if (!tools && process.env.TWOPASS_REQUIRE_NODE === '1')
  throw new Error('buildah and runc (as root) are required (TWOPASS_REQUIRE_NODE=1): run test/node/build.sh');
if (!tools)
  console.log(
    off
      ? '  !!! TWOPASS_NO_NODE=1: the image suite is SKIPPED !!!'
      : '  !!! no buildah/runc (or not root): the image suite is SKIPPED (test/node/build.sh) !!!',
  );

const test = suite<{ config: ImageConfig }>('the image, built from infra/Dockerfile and run by runc');
const it = tools ? test : test.skip;

type ImageConfig = { Env?: string[]; Entrypoint?: string[]; User?: string; WorkingDir?: string };

const sh = (cmd: string, args: string[]) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr || r.stdout}`);
  return r.stdout.trim();
};

/** Runs the image's rootfs with runc as the CronJobs run it; `args` replace the entrypoint's arguments. */
function runImage(config: ImageConfig, args: string[], opts: { entrypoint?: boolean } = {}) {
  const ctr = sh('buildah', ['from', '--quiet', IMAGE]);
  const bundle = mkdtempSync(join(tmpdir(), 'twopass-runc-'));
  try {
    const rootfs = sh('buildah', ['mount', ctr]);
    const [uid, gid] = (config.User ?? '0:0').split(':').map(Number);
    const spec = {
      ociVersion: '1.0.2',
      process: {
        terminal: false,
        user: { uid, gid },
        args: opts.entrypoint === false ? args : [...(config.Entrypoint ?? []), ...args],
        env: config.Env ?? [],
        cwd: config.WorkingDir || '/',
        capabilities: { bounding: [], effective: [], permitted: [], ambient: [] },
        noNewPrivileges: true,
        rlimits: [{ type: 'RLIMIT_NOFILE', hard: 4096, soft: 4096 }],
      },
      root: { path: rootfs, readonly: true },
      hostname: 'twopass',
      mounts: [
        { destination: '/proc', type: 'proc', source: 'proc' },
        {
          destination: '/dev',
          type: 'tmpfs',
          source: 'tmpfs',
          options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'],
        },
        {
          destination: '/tmp',
          type: 'tmpfs',
          source: 'tmpfs',
          options: ['nosuid', 'nodev', 'mode=1777', 'size=65536k'],
        },
      ],
      // The host's network (loopback): the sandbox's fake servers listen on 127.0.0.1.
      linux: { namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }] },
    };
    writeFileSync(join(bundle, 'config.json'), JSON.stringify(spec));
    const r = spawnSync('runc', ['run', '--bundle', bundle, `twopass-${process.pid}-${Date.now()}`], {
      encoding: 'utf8',
      timeout: 300_000,
    });
    return { code: r.status, out: r.stdout, err: r.stderr };
  } finally {
    spawnSync('buildah', ['umount', ctr]);
    spawnSync('buildah', ['rm', ctr]);
    rmSync(bundle, { recursive: true, force: true });
  }
}

test.before((ctx) => {
  if (!tools) return;
  const built = spawnSync('bash', [join(ROOT, 'test/node/image.sh')], {
    encoding: 'utf8',
    timeout: 1_200_000,
  });
  if (built.status !== 0) throw new Error(`test/node/image.sh failed:\n${built.stdout}\n${built.stderr}`);
  const lines = built.stdout.trim().split('\n');
  console.log(`  ${lines.filter((l) => l.includes('size:')).join('')}`);
  ctx.config = (
    JSON.parse(sh('buildah', ['inspect', '--type', 'image', IMAGE])) as { OCIv1: { config: ImageConfig } }
  ).OCIv1.config;
});

it('runs as 65532 with the heap cap, and `twopass --version` answers', ({ config }) => {
  assert.is(config.User, '65532:65532');
  assert.ok(config.Env?.some((e) => e.startsWith('NODE_OPTIONS=') && e.includes('--max-old-space-size=')));
  const id = runImage(config, ['id'], { entrypoint: false });
  assert.is(id.code, 0, id.err);
  assert.match(id.out, /uid=65532 gid=65532/);
  const v = runImage(config, ['--version']);
  assert.is(v.code, 0, v.err);
  assert.match(v.out, /^twopass \d+\.\d+\.\d+/);
});

it('`twopass demo` ends `sandbox: OK` on a read-only root with only /tmp writable', ({ config }) => {
  const r = runImage(config, ['demo']);
  assert.is(r.code, 0, `${r.out.slice(-1500)}\n${r.err.slice(-1500)}`);
  assert.match(r.out, /sandbox: OK/);
  const ro = runImage(config, ['sh', '-c', 'touch /app/x 2>&1; touch /tmp/x && echo tmp-ok'], {
    entrypoint: false,
  });
  assert.match(ro.out, /Read-only file system/);
  assert.match(ro.out, /tmp-ok/);
});

it('holds no development dependency', ({ config }) => {
  const r = runImage(config, ['ls', '/app/node_modules', '/app/node_modules/@biomejs'], {
    entrypoint: false,
  });
  const dirs = r.out.split(/\s+/);
  for (const dev of ['typescript', 'uvu', 'fast-check', 'node', 'biome'])
    assert.not.ok(dirs.includes(dev), `${dev} is in the image`);
  assert.ok(dirs.includes('pino') && dirs.includes('zod'), 'the runtime dependencies are');
});

test.run();
