/**
 * A cloud rule as a function: the targets are Neutron ports or floating IPs of one project,
 * listed completely (the client proves every page), filtered server-side by project and
 * tags, and listed before the evidence; each is the cluster's own only by the rule's
 * ownership (naming the cluster) and its project; its identity is its id and its
 * fingerprint its revision_number, and a delete carries `If-Match: revision_number=N` after
 * a re-check on a fresh read and fresh evidence. Neutron without revision-if-match: nothing
 * is deleted (the client refuses to send a conditional delete it cannot make conditional).
 */

import { type AnyFunction, defineFunction, type KindSpec, openStackObject } from '../contract/index.ts';
import { noRestoreFacts, openStackResourcePayload, readPayload } from '../contract/tombstone.ts';
import { CinderClient } from '../openstack/cinder.ts';
import { loadCloudConfig } from '../openstack/config.ts';
import { Http } from '../openstack/http.ts';
import { KeystoneAuth } from '../openstack/keystone.ts';
import { NeutronClient } from '../openstack/neutron.ts';
import { OctaviaClient } from '../openstack/octavia.ts';
import { ruleAccess } from './access.ts';
import { recheck, remove } from './cloud-act.ts';
import {
  CLOUD_COLLECTIONS,
  type CloudEvidenceCollection,
  type CloudReader,
  type CloudWriter,
  type Resource,
  targetOf,
} from './cloud-collections.ts';
import { type Data, data, observeOf } from './cloud-observe.ts';
import type { CloudRule } from './cloud-rule.ts';
import { cloudSettingsOf, type Settings } from './cloud-settings.ts';

export type { CloudReader, CloudWriter } from './cloud-collections.ts';
export { cloudRuleSettings, cloudSettingsOf, OCCM_DEFAULT_CLUSTER } from './cloud-settings.ts';

import { ruleDefaults } from './function.ts';

/** A cloud resource's tombstone: the resource as read just before its deletion. */
const CLOUD_TOMBSTONE = { object: openStackResourcePayload, restore: noRestoreFacts };

/** Builds the function of a compiled cloud rule. */
export function cloudRuleFunction(rule: CloudRule): AnyFunction {
  const kind = rule.kind;
  const target = targetOf(rule.collection);
  const spec: KindSpec<Data, CloudReader, CloudWriter, Settings> = {
    data,
    note: `decided by rule ${rule.name} (${rule.source}): in use when ${rule.inUse.source.trim()}`,
    unused: rule.unused,
    removal: !target.deletes
      ? `never: a ${kind} is only reported`
      : rule.release
        ? `PUT each port still in the group without it (If-Match: the port's revision_number; only ports release.when allows), then DELETE the ${kind} with If-Match: revision_number=<the revision observed>`
        : target.ifMatch
          ? `DELETE the ${kind} with If-Match: revision_number=<the revision observed> (Neutron's revision-if-match: a changed ${kind} answers 412 and is skipped)`
          : `DELETE the ${kind} (cascade) without a precondition, which ${target.service} does not offer: the re-check on a fresh read just before is the last guard; one being changed (PENDING_*) answers 409 and is skipped`,
    touches: (d) =>
      !target.deletes || !target.touch
        ? []
        : [
            target.touch(d.id),
            // released from the ports it is still on: any port, each write on its revision
            ...(rule.release ? [{ object: openStackObject('neutron', 'ports', '*') }] : []),
          ],
    recheck: (r, t, ctx) => recheck(rule, r, t, ctx),
    remove: (w, t, ctx) => remove(rule, w, t, ctx),
    place: (d) => d.project ?? '',
    async restore(_r, w, tomb, ctx) {
      const read = readPayload(tomb, CLOUD_TOMBSTONE);
      if (!read.ok) return { outcome: 'refused', reason: read.reason };
      const o = read.object as Resource;
      if (target.restore) return target.restore(w, o, ctx);
      return { outcome: 'refused', reason: target.noRestore ?? `a ${kind} cannot be restored by twopass` };
    },
    async confirmGone(r, { data: d }, ctx) {
      const o = await target.get(r, d.id, ctx.signal);
      // Octavia deletes in the background: PENDING_DELETE is its provider at work
      return o === undefined || target.gone?.(o) === true;
    },
  };

  const settings = cloudSettingsOf(rule);
  return defineFunction<typeof settings, CloudReader, CloudWriter, Record<string, Data>>({
    name: rule.name,
    description: rule.description,
    settings,
    defaults: { ...ruleDefaults(rule), enabled: false },
    access: ruleAccess(rule),
    ...(rule.reportOnly ? { reportOnly: true } : {}),
    kinds: { [kind]: spec },
    async connect(c) {
      const cloud = loadCloudConfig(c.env, c.settings.cloud !== undefined ? { cloud: c.settings.cloud } : {});
      const http = new Http({ timeoutMs: c.callTimeoutMs, time: c.time });
      const auth = new KeystoneAuth(cloud, http, c.time.now);
      const neutron = new NeutronClient(auth, http, c.settings.pageSize);
      // a client for each service the rule reads (its targets' and its evidence's)
      const services = new Set(
        [rule.collection, ...rule.cloudEvidence.map((e) => e.collection as CloudEvidenceCollection)].map(
          (x) => CLOUD_COLLECTIONS[x].service,
        ),
      );
      const cinder = services.has('Cinder') ? new CinderClient(auth, http, c.settings.pageSize) : undefined;
      const octavia = services.has('Octavia')
        ? new OctaviaClient(auth, http, c.settings.pageSize)
        : undefined;
      return {
        reader: { kube: c.kube, neutron, cinder, octavia },
        writer: { kube: c.kube, neutron, octavia },
        close: () => http.close(),
      };
    },
    observe: observeOf(rule),
  });
}
