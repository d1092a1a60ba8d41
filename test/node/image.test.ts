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

/** Node in the image, with a script (the image has no shell: node is the only program in it). */
const nodeIn = (config: ImageConfig, script: string, env: string[] = []) =>
  runImage({ ...config, Env: [...(config.Env ?? []), ...env] }, ['/usr/local/bin/node', '-e', script], {
    entrypoint: false,
  });

it('runs as 65532 with the heap cap, and `twopass --version` answers', ({ config }) => {
  assert.is(config.User, '65532:65532');
  assert.ok(config.Env?.some((e) => e.startsWith('NODE_OPTIONS=') && e.includes('--max-old-space-size=')));
  const id = nodeIn(
    config,
    'console.log(process.getuid(), process.getgid(), require("os").userInfo().username)',
  );
  assert.is(id.code, 0, id.err);
  assert.is(id.out.trim(), '65532 65532 nonroot');
  const v = runImage(config, ['--version']);
  assert.is(v.code, 0, v.err);
  assert.match(v.out, /^twopass \d+\.\d+\.\d+/);
});

it('`twopass demo` ends `sandbox: OK` on a read-only root with only /tmp writable', ({ config }) => {
  const r = runImage(config, ['demo']);
  assert.is(r.code, 0, `${r.out.slice(-1500)}\n${r.err.slice(-1500)}`);
  assert.match(r.out, /sandbox: OK/);
  const ro = nodeIn(
    config,
    `const fs = require('fs');
     try { fs.writeFileSync('/app/x', ''); console.log('app-written'); } catch (e) { console.log(e.code); }
     fs.writeFileSync('/tmp/x', ''); console.log('tmp-ok');`,
  );
  assert.is(ro.code, 0, ro.err);
  assert.match(ro.out, /EROFS/);
  assert.match(ro.out, /tmp-ok/);
});

it('holds no development dependency, no shell, no npm: node, its libraries and the app', ({ config }) => {
  const r = nodeIn(
    config,
    `const fs = require('fs');
     console.log(JSON.stringify({
       modules: fs.readdirSync('/app/node_modules'),
       top: fs.readdirSync('/').sort(),
       sh: fs.existsSync('/bin/sh') || fs.existsSync('/usr/bin/sh'),
       npm: fs.existsSync('/usr/local/lib/node_modules') || fs.existsSync('/usr/local/bin/npm'),
       declarations: fs.readdirSync('/app/node_modules/zod', { recursive: true }).filter((f) => /.d.[cm]?ts$|.map$/.test(f)).length,
     }));`,
  );
  assert.is(r.code, 0, r.err);
  const seen = JSON.parse(r.out.trim()) as {
    modules: string[];
    top: string[];
    sh: boolean;
    npm: boolean;
    declarations: number;
  };
  for (const dev of ['typescript', 'uvu', 'fast-check', 'node', '@biomejs'])
    assert.not.ok(seen.modules.includes(dev), `${dev} is in the image`);
  assert.ok(seen.modules.includes('pino') && seen.modules.includes('zod'), 'the runtime dependencies are');
  assert.not.ok(seen.sh, 'a shell is in the image');
  assert.not.ok(seen.npm, 'npm is in the image');
  assert.is(seen.declarations, 0, 'type declarations or source maps are in the image');
  // nothing beside node's own directories, the app and /etc's user entries (proc, dev and tmp are mounts)
  for (const d of seen.top)
    assert.ok(
      ['app', 'dev', 'etc', 'home', 'lib', 'lib64', 'proc', 'tmp', 'usr'].includes(d),
      `/${d} is in the image`,
    );
});

it('is under 200 MB (uncompressed, as `buildah images` counts it)', () => {
  // buildah prints it in decimal units (`183 MB`)
  const text = sh('buildah', ['images', '--format', '{{.Size}}', IMAGE]).split('\n')[0]!;
  const m = /^([\d.]+)\s*(B|kB|MB|GB)$/.exec(text);
  assert.ok(m, `buildah's size: ${text}`);
  const size = Number(m[1]) * { B: 1, kB: 1e3, MB: 1e6, GB: 1e9 }[m[2] as 'B' | 'kB' | 'MB' | 'GB'];
  console.log(`  image size: ${(size / 1e6).toFixed(1)} MB`);
  assert.ok(Number.isFinite(size) && size > 100e6, `unexpected size ${size}`);
  assert.ok(size < 200e6, `the image is ${(size / 1e6).toFixed(1)} MB`);
});

it('runs from the compile cache built into it, and writes none (a read-only root)', ({ config }) => {
  const r = runImage({ ...config, Env: [...(config.Env ?? []), 'NODE_DEBUG_NATIVE=COMPILE_CACHE'] }, [
    '--version',
  ]);
  assert.is(r.code, 0, r.err);
  const accepted = r.err.split('\n').filter((l) => /V8 code cache for ESM .* was accepted/.test(l)).length;
  const rejected = r.err.split('\n').filter((l) => /was rejected|checksum mismatch/.test(l)).length;
  assert.ok(accepted >= 20, `${accepted} modules came from the compile cache\n${r.err.slice(0, 2000)}`);
  assert.is(rejected, 0, r.err.slice(0, 2000));
});

test.run();
