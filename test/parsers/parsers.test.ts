/** Parsers: known values, and fast-check fuzzing (nothing throws but the layer's own error). */
import fc from 'fast-check';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Bitmap } from '../../functions/danm-endpoints/bitmap.ts';
import { parseEndpoint, parseNetwork } from '../../functions/danm-endpoints/model.ts';
import { requestedNetworks } from '../../functions/danm-endpoints/pods.ts';
import { NETWORK_STATUS, networkStatusIps } from '../../functions/whereabouts-ips/model.ts';
import { parseConfigText, resolveConfig } from '../../shared/config.ts';
import { parseDuration } from '../../shared/engine/duration.ts';
import { ConfigError } from '../../shared/errors.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import {
  formatAddress,
  parseAddress,
  parseCidr,
  parseInterfaceAddress,
  parseIPv4,
} from '../../shared/net/ip.ts';
import { fromCloud } from '../../shared/openstack/config.ts';
import { OpenStackConfigError } from '../../shared/openstack/errors.ts';
import { StateCorruptError } from '../../shared/state/errors.ts';
import { parseState } from '../../shared/state/schema.ts';

const RUNS = 500;

test('the seed bitmap decodes to the bits the incident report shows', () => {
  const cidr = parseCidr('10.10.10.0/24')!;
  const b = Bitmap.decode('gDwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE=', cidr) as Bitmap;
  assert.equal([...b.setBits()], [0, 10, 11, 12, 13, 255]);
  assert.is(
    Bitmap.empty(cidr).with(0, true).with(255, true).encode(),
    'gAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE=',
  );
  const five = Bitmap.empty(cidr).with(0, true).with(5, true);
  assert.is(five.bytes[0], 0x84);
});

test('bitmaps: wrong length, bad base64, missing are errors, never exceptions', () => {
  const cidr = parseCidr('10.10.10.0/24')!;
  assert.match(String(Bitmap.decode('AAAA', cidr)), /3 bytes, 10\.10\.10\.0\/24 needs 32/);
  assert.match(String(Bitmap.decode('@@@@', cidr)), /not valid base64/);
  assert.match(String(Bitmap.decode(undefined, cidr)), /missing/);
  assert.match(String(Bitmap.decode('AA', parseCidr('fd00::/64')!)), /larger than/);
  fc.assert(
    fc.property(fc.anything(), fc.integer({ min: 8, max: 30 }), (v, prefix) => {
      const r = Bitmap.decode(v, parseCidr(`10.0.0.0/${prefix}`)!);
      return typeof r === 'string' || r instanceof Bitmap;
    }),
    { numRuns: RUNS },
  );
});

test('bitmap set/clear round trip', () => {
  fc.assert(
    fc.property(fc.uniqueArray(fc.integer({ min: 0, max: 255 })), (bits) => {
      const cidr = parseCidr('10.0.0.0/24')!;
      let b = Bitmap.empty(cidr);
      for (const i of bits) b = b.with(i, true);
      const back = Bitmap.decode(b.encode(), cidr) as Bitmap;
      assert.equal(
        [...back.setBits()],
        [...bits].sort((x, y) => x - y),
      );
      for (const i of bits) b = b.with(i, false);
      return [...b.setBits()].length === 0;
    }),
    { numRuns: RUNS },
  );
});

test('addresses: known values and round trips', () => {
  assert.is(parseAddress('10.10.10.5')?.value, 0x0a0a0a05n);
  assert.is(parseAddress('010.1.1.1'), undefined);
  assert.is(parseAddress('256.1.1.1'), undefined);
  assert.is(parseAddress('1:2:3:4:5:6:7:8:9'), undefined);
  assert.is(parseAddress('::ffff:1.2.3.4')?.value, 0xffff01020304n);
  assert.is(parseInterfaceAddress('none'), 'none');
  assert.is(parseInterfaceAddress('10.0.0.1/33'), undefined);
  assert.is(parseCidr('10.10.10.7/24')?.text, '10.10.10.0/24');
  fc.assert(
    fc.property(fc.oneof(fc.ipV4(), fc.ipV6()), (ip) => {
      const a = parseAddress(ip);
      if (!a) return false;
      const again = parseAddress(formatAddress(a.family, a.value));
      return again?.value === a.value;
    }),
    { numRuns: RUNS },
  );
  fc.assert(
    fc.property(fc.string(), (s) => {
      parseAddress(s);
      parseCidr(s);
      parseInterfaceAddress(s);
      parseDuration(s);
      return true;
    }),
    { numRuns: RUNS },
  );
});

const objectArb = fc.record({
  metadata: fc.record({
    name: fc.string(),
    namespace: fc.string(),
    uid: fc.string(),
    resourceVersion: fc.string(),
    annotations: fc.option(fc.dictionary(fc.string(), fc.string()), { nil: undefined }),
  }),
  spec: fc.anything(),
});

test('DANM objects: any shape parses to a value or a reason, never throws', () => {
  fc.assert(
    fc.property(objectArb, (o) => {
      const e = parseEndpoint(o as unknown as KubeObject);
      if (!e.ok) assert.type(e.reason, 'string');
      const n = parseNetwork(o as unknown as KubeObject, 'DanmNet');
      return n.problem === undefined || typeof n.problem === 'string';
    }),
    { numRuns: RUNS },
  );
  fc.assert(
    fc.property(fc.anything(), (spec) => {
      const e = parseEndpoint({
        metadata: { name: 'x', namespace: 'n', uid: 'u', resourceVersion: '1' },
        spec,
      } as KubeObject);
      return e.ok === false || typeof e.ep.podUID === 'string';
    }),
    { numRuns: RUNS },
  );
});

test('IPv4: read a character at a time, it accepts exactly the dotted quads the rule names', () => {
  // the rule, as written: four parts of 1-3 digits, no leading zero, each at most 255
  const rule = (s: string): bigint | undefined => {
    const parts = s.split('.');
    if (parts.length !== 4) return undefined;
    let v = 0n;
    for (const p of parts) {
      if (!/^[0-9]{1,3}$/.test(p) || (p.length > 1 && p.startsWith('0'))) return undefined;
      if (Number(p) > 255) return undefined;
      v = (v << 8n) | BigInt(Number(p));
    }
    return v;
  };
  const part = fc.oneof(
    fc.nat({ max: 300 }).map(String),
    fc.constantFrom('', '0', '00', '01', '007', '1000', 'a', ' 1', '+1', '٣'),
  );
  const quads = fc.array(part, { minLength: 0, maxLength: 6 }).map((ps) => ps.join('.'));
  fc.assert(
    fc.property(fc.oneof(quads, fc.string({ maxLength: 20 })), (s) => {
      assert.is(parseIPv4(s), rule(s), JSON.stringify(s));
    }),
    { numRuns: RUNS * 10 },
  );
  assert.is(parseIPv4('255.255.255.255'), 0xffffffffn);
  assert.is(parseIPv4('0.0.0.0'), 0n);
  for (const bad of ['1.2.3.4.', '.1.2.3.4', '1..2.3', '1.2.3', '1.2.3.256', '1.2.3.04', ''])
    assert.is(parseIPv4(bad), undefined, bad);
});

test('config text: anything is a config or a ConfigError', () => {
  fc.assert(
    fc.property(
      fc.oneof(
        fc.string(),
        fc.jsonValue().map((v) => JSON.stringify(v)),
      ),
      (text) => {
        try {
          parseConfigText(text, 'fuzz');
        } catch (err) {
          if (!(err instanceof ConfigError)) throw err;
        }
        return true;
      },
    ),
    { numRuns: RUNS },
  );
});

test('evidenceMaxAge: a duration up to 10m, default 30s; anything else is a ConfigError naming it', () => {
  assert.is(resolveConfig({}, 'test').evidenceMaxAgeMs, 30_000);
  assert.is(resolveConfig(parseConfigText('evidenceMaxAge: 2m\n', 't'), 't').evidenceMaxAgeMs, 120_000);
  for (const bad of ['evidenceMaxAge: 30', 'evidenceMaxAge: 20m', 'evidenceMaxAge: soon'])
    try {
      parseConfigText(`${bad}\n`, 'bad');
      assert.unreachable(`${bad} was accepted`);
    } catch (err) {
      assert.instance(err, ConfigError);
      assert.match((err as Error).message, /evidenceMaxAge/);
    }
});

test('network-status annotations and DANM interface requests: anything is a value or a reason', () => {
  assert.equal(
    [...(networkStatusIps({ [NETWORK_STATUS]: '[{"ips":["10.0.0.1","fd00::1"]}]' }) as Set<string>)],
    ['10.0.0.1', 'fd00::1'],
  );
  assert.is(networkStatusIps({}), undefined);
  assert.match(String(networkStatusIps({ [NETWORK_STATUS]: '{' })), /not JSON/);
  fc.assert(
    fc.property(
      fc.oneof(
        fc.string(),
        fc.jsonValue().map((v) => JSON.stringify(v)),
      ),
      (raw) => {
        const r = networkStatusIps({ [NETWORK_STATUS]: raw });
        const nets = requestedNetworks({
          metadata: {
            name: 'p',
            namespace: 'n',
            uid: 'u',
            resourceVersion: '1',
            annotations: { 'danm.k8s.io/interfaces': raw },
          },
        });
        return (
          (typeof r === 'string' || r instanceof Set) &&
          (nets.kind === 'unreadable' || (nets.kind === 'default') === isEmptyList(raw))
        );
      },
    ),
    { numRuns: RUNS },
  );
});

function isEmptyList(raw: string): boolean {
  try {
    const v = JSON.parse(raw) as unknown;
    return Array.isArray(v) && v.length === 0;
  } catch {
    return false;
  }
}

test('clouds.yaml: any cloud entry is a config or an OpenStackConfigError that never echoes a secret', () => {
  fc.assert(
    fc.property(
      fc.jsonValue(),
      fc.constantFrom('password', 'v3applicationcredential', undefined),
      (auth, type) => {
        try {
          fromCloud(
            'fuzz',
            {
              ...(type ? { auth_type: type } : {}),
              auth:
                auth && typeof auth === 'object'
                  ? { ...(auth as object), password: 'p4ssw0rd-secret' }
                  : auth,
            },
            'fuzz',
          );
        } catch (err) {
          if (!(err instanceof OpenStackConfigError)) throw err;
          assert.not.ok((err as Error).message.includes('p4ssw0rd-secret'));
        }
        return true;
      },
    ),
    { numRuns: RUNS },
  );
});

test('stored state: anything is a state or a StateCorruptError', () => {
  fc.assert(
    fc.property(fc.anything(), (raw) => {
      try {
        parseState(raw, 'f', 'fuzz', 'file:/fuzz');
      } catch (err) {
        if (!(err instanceof StateCorruptError)) throw err;
      }
      return true;
    }),
    { numRuns: RUNS },
  );
});

test.run();
