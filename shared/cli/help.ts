/** The help texts of the `twopass` command. */
import { HISTORY_RETENTION } from '../state/history.ts';
import { VERSION } from '../version.ts';

export { VERSION };

export const COMMON = `Common options:
  --config FILE            YAML config (see README); flags override env, env overrides the file
  --state file:DIR|configmap:NAMESPACE
                           where observations are kept (default file:.twopass)
  --kubeconfig FILE        kubeconfig (default $KUBECONFIG, ~/.kube/config, in-cluster)
  --context NAME           kubeconfig context
  --output json|table      diff-log format (default: table on a terminal, else json)
  -h, --help               help for the command`;

export const HELP: Record<string, string> = {
  main: `twopass ${VERSION}: a garbage collector for leaked network resources that deletes
only what two complete snapshots, a grace window apart, both saw unused.

Usage: twopass <command> [options]

Commands:
  run <function...>|--all  observe, decide and (with --apply) delete
  apply --from-report FILE [FILE...]
                           delete what reviewed reports (agreed across time) approved and is still confirmed
  functions                list the functions and their defaults
  state show <function>    show the stored observations
  state reset <function>   forget the observations (deletes no resource)
  restore <function> [--key KEY]... [--run RUN_ID] [--apply]
                           bring deleted targets back from their tombstones (dry run by default)
  state accept-evidence <function>
                           accept today's evidence counts as the baseline (deletes nothing)
  explain <function> <key|name>
                           why a target is pending, rescued, indeterminate or confirmed
  history <function> [--last N] [--run RUN_ID]
                           what the function's last runs did, and why (kept beside the state)
  diff A B                 compare two saved snapshots (--save-snapshot)
  schedule                 run every enabled function on its cron schedule; serve /healthz, /metrics
  rules check|test|rbac|manifests FILE
                           user-defined functions in CEL: compile and explain, decide on a
                           world file, print the RBAC or the CronJob manifests
  demo                     the sandbox: a fake cluster with the DANM incident (npm start)

Run \`twopass <command> --help\` (or \`twopass help <command>\`) for a command's options;
\`twopass version\` (or --version) prints the version.

Exit codes: 0 ok, 1 unexpected error, 2 bad config/arguments, 3 snapshot incomplete
(aborted, nothing deleted), 4 refused by the blast-radius guard, 5 another run holds the lock,
6 more deletions than approval.requiredAbove: a report waits for a human, nothing deleted.`,
  run: `Usage: twopass run <function...>|--all [options]

Lists targets then evidence, decides with the two-observation rule, and logs what is
new, pending, rescued, reset, indeterminate and confirmed. Dry run by default.

Options:
  --apply                  delete confirmed targets (re-check + server-side precondition)
  --record                 in a dry run, still save observations (so they build up)
  --all                    every enabled function
  --grace DURATION         set every function's grace window (e.g. 15m; at least 1m unless
                           allowShortGrace); a kind that waits longer (kindGrace) keeps
                           its longer wait, one that waits less is raised to it
  --deadline DURATION      overall deadline of a run (default 10m)
  --save-snapshot DIR      write each snapshot as JSON into DIR (for \`twopass diff\`)
  --report FILE            write what would be deleted, for review (one function). Without
                           --apply the run is a dry run, even when the configuration says
                           apply: true. With --apply it is the record of what the run set
                           out to delete (apply --from-report refuses it), or, above
                           approval.requiredAbove, the report that waits for a human
  --pushgateway URL        push the run's metrics to a Prometheus Pushgateway
  --metrics-textfile PATH  write the run's metrics for node-exporter's textfile collector
${COMMON}`,
  restore: `Usage: twopass restore <function> [--key KEY]... [--run RUN_ID] [--apply] [options]

Every deletion leaves a tombstone first: the object as it was re-read just before it was
deleted, with the run, the snapshot's fingerprint and why it was judged unused (kept 30
days, at most 4000 a function, beside the state). Without --key or --run, lists them.
With them, checks each chosen tombstone (the newest of each key) against what exists now
and says ready or refused, and why (the address was taken meanwhile, an object of that
name exists); --apply re-creates the ready ones. It holds the function's lock.

  --key KEY                a target's key (repeat for more)
  --run RUN_ID             everything one run deleted
  --apply                  write (without it: a dry run that checks only)

Exit 1 when any chosen tombstone was refused.
${COMMON}`,
  apply: `Usage: twopass apply --from-report FILE [options]

Deletes the entries of a report (\`twopass run <function> --report FILE\`) that a human
reviewed, and only those that are still confirmed now: a fresh complete snapshot is
taken, and an entry is deleted only when it is confirmed again with the same key and
fingerprint, after the re-check and with the server-side precondition of any run.
Entries changed, in use again or gone since the report are skipped, each with its
reason (approval.skipped). A report of another cluster, or older than
functions.<function>.approval.maxReportAge (default 24h), is refused.

Reports agreed across time: with two reports or more (--from-report A B C), only the
entries present in every one of them with the same fingerprint are applied, and the
oldest and the newest must be at least --apart (default 1h) apart; each entry left out
is logged with why (approval.not-agreed). Every report passes the checks above.

Options:
  --from-report FILE...    the reviewed report(s)
  --apart DURATION         how far apart the oldest and newest reports must be (default 1h)
  --pushgateway URL, --metrics-textfile PATH   as for run
${COMMON}`,
  schedule: `Usage: twopass schedule [--config FILE] [--listen HOST:PORT]

Runs each enabled function on its \`schedule\` (cron, 5 or 6 fields; a run never
overlaps the previous one of the same function) and serves /healthz and /metrics on
--listen (default 127.0.0.1:9464, or metricsHost/metricsPort in the config).
SIGTERM/SIGINT: no new runs start, a running run abandons the deletions it has not
started, and the process exits 0 when it is done.
${COMMON}`,
  functions: `Usage: twopass functions [--config FILE] [--grace DURATION] [--output json|table]

Lists the functions (built in, and the config's rules), what they delete, their kinds
and their effective defaults (--grace shows them as a run with it would use them).

Options:
  --config FILE            YAML config
  --grace DURATION         as for run
  --output json|table      default: table on a terminal, else json
  -h, --help               this help`,
  rules: `Usage: twopass rules <subcommand> FILE [options]

A rule file defines a function in CEL (see README, "Write your own rule"). Every
expression is compiled and type-checked when the file loads; an error names the rule,
the field and the position (exit 2).

Subcommands:
  check FILE               compile, and explain what each rule lists, reads and decides
  test FILE WORLD.yaml     decide each target against the objects of WORLD.yaml (YAML
                           documents or a List; no cluster, nothing written). An object
                           annotated twopass.io/expect: in-use|unused|indeterminate|kept
                           is checked: a different decision exits 1
  rbac FILE                the ClusterRole the rule needs (list on targets and evidence,
                           get and delete on targets) and its binding
  manifests FILE           everything to run the rule as its own CronJob beside the base
                           install: ServiceAccount, the RBAC above, the state Role, the
                           Events ClusterRole, the rule's ConfigMap, the CronJob

Run a rule with the other functions: list it under \`rules:\` in the config (inline or
\`{ file: PATH }\`), or name its file in TWOPASS_RULES; then \`twopass run NAME\`.

Options:
  --namespace NS           where the ServiceAccount and CronJob live (default twopass-system)
  --image IMAGE            the image of the CronJob (default twopass:${VERSION})
  --output json|table      check and test: one JSON object per rule or target
  -h, --help               this help`,
  state: `Usage: twopass state show|reset|accept-evidence <function> [options]

show             prints the stored candidates (first/last unused observation, count)
                 and the evidence baseline
reset            forgets every observation of the function: the next run starts over.
                 It never deletes a resource.
accept-evidence  takes one complete snapshot (read-only, nothing is deleted) and makes
                 its evidence counts the new baseline, keeping every candidate: the way
                 out after a real scale-down refused runs ("evidence ... shrank").
${COMMON}`,
  history: `Usage: twopass history <function> [--last N] [--run RUN_ID] [options]

What the function's last runs did: per run, how many targets were new, pending, rescued,
reset, indeterminate, confirmed and deleted (newest first); with --run, one run in full,
each target with why. Kept beside the state (--state), so it outlives the Job's pod and
its logs: the last ${HISTORY_RETENTION.runs} runs that wrote state (deleting runs, and dry runs with
--record), each list cut to its first ${HISTORY_RETENTION.items} entries (its count is kept whole).
A record that cannot be written never stops a deletion: the run logs
history.write-failed and exits 1.

Options:
  --last N                 how many runs to list (default 20)
  --run RUN_ID             one run in full (the start of its id is enough)
${COMMON}`,
  explain: `Usage: twopass explain <function> <key|name> [options]

Observes (read-only: nothing is deleted, no state is written) and says what the
engine decides for one target, next to what the stored state holds for it.

A target is named by its key (a Kubernetes UID, an OpenStack port ID, or for a bit
or an allocation \`<network uid>/<family>/<address>\`) or by the name the diff log and
\`state show\` print, whole or by its leading words: "default/ss-cinfo-0 eth0", or the pod
alone ("default/ss-cinfo-0", "ss-cinfo-0"); quote names with spaces. When several
objects match (the old and the new DanmEp of a re-created pod, told apart by the
pod UID and address in their names), each is listed with its key and decision.
${COMMON}`,
  diff: `Usage: twopass diff A.json B.json [--output json|table]\n\nCompares two snapshots saved by \`twopass run --save-snapshot DIR\` of the same function:\nthe targets that appeared, vanished, changed, and whose use changed.`,
  demo: `Usage: twopass demo [--output json|table]

Starts a fake Kubernetes API server and a fake Keystone + Neutron on 127.0.0.1, seeds
the DANM StatefulSet incident, a whereabouts leak, an OpenStack load-balancer port
leak and CiliumEndpoints of gone pods, and runs the three built-in functions
(danm-endpoints, whereabouts-ips, lbaas-ports) and a rule in CEL (cilium-endpoints)
against them on a simulated clock. It needs no cluster and no cloud, touches nothing
outside the sandbox, and removes its temporary files when it ends.`,
};
