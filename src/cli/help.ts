/** What `fencekeeper [command] --help` prints. */

const EXIT_CODES = `exit codes:
  cmd's own    run, elect: cmd's exit code passes through (128 + n when signal n ended it)
  0            done
  64           usage: a bad flag, argument or lock name, or a --safety-margin or
               --grace that does not fit the negotiated session timeout, or
               input the lock service refuses once reached (INVALID_ARGUMENT: e.g.
               a redlock:// URL that names one server under two host names)
  69           ZooKeeper could not be reached (run: within --timeout, if given), or the
               session ended while waiting
               (migrate: the database could not be reached or refused the migration)
  70           internal error (a bug: please report it)
  75           run: the lock was not acquired within --timeout
  76           the lock was lost: cmd was stopped and exited 0, or never started
  77           the lock service refused our credentials (ZK_AUTHFAILED, ZK_NOAUTH), or the
               lock's nodes carry another ACL than the run asks for (ACL_MISMATCH)
  127          cmd could not be started
  128 + n      interrupted by signal n (SIGINT, SIGTERM) while connecting to the lock
               service or waiting for the lock: nothing is left held`;

const LOCK_SERVICE = `  --lock-service <url>       the lock service (default: $FENCEKEEPER_LOCK_SERVICE, else the
                             ZooKeeper of --zookeeper): zookeeper://h:2181[,h:2182][/chroot],
                             redis://[user@]h:6379[/db] (one Redis: the key's TTL is
                             --session-timeout), redlock://h1:6379,h2:6380,h3:6381 (Redlock),
                             etcd://h1:2379[,h2:2379] (the lease's TTL is --session-timeout),
                             postgres://[user@]h:5432/db (postgresql:// too; the session
                             lease is --session-timeout; tables from fencekeeper migrate);
                             a URL with a password only from $FENCEKEEPER_LOCK_SERVICE`;

const STOPPING = `When the lock is lost while cmd runs, cmd's process group gets SIGTERM,
then SIGKILL --grace later. cmd runs under a small supervisor process that
holds a lease renewed by fencekeeper, so this happens however fencekeeper
fails: if fencekeeper is killed, at once; if it is frozen (SIGSTOP, a
stalled machine), at the lock's step-down deadline. --grace is at most half
the safety margin, so cmd is gone before the session can expire, that is,
before the next holder can be granted the lock. Processes cmd leaves behind
in its process group are stopped the same way before the lock is released.`;

const ZOOKEEPER_SECURITY = `  --zookeeper-tls            speak TLS to the servers' secure client port, verified
                             against the system's CA roots ($ZOOKEEPER_TLS=1)
  --zookeeper-tls-ca <file>  PEM CA the servers' certificates must chain to; implies TLS
                             ($ZOOKEEPER_TLS_CA)
  --zookeeper-tls-cert <file>, --zookeeper-tls-key <file>
                             PEM client certificate and key, for servers that require one
                             ($ZOOKEEPER_TLS_CERT, $ZOOKEEPER_TLS_KEY)
  --zookeeper-tls-servername <name>
                             the name the certificates must carry (default: each host dialled)
                             ($ZOOKEEPER_TLS_SERVERNAME)
  --zookeeper-auth-file <file>
                             digest credentials user:password, the file's first line
                             ($ZOOKEEPER_AUTH_FILE); or $ZOOKEEPER_AUTH=user:password.
                             Never on the command line: ps shows arguments to every user
  --zookeeper-acl <creator|open>
                             the ACL of the lock nodes a run creates: creator = its identity
                             may do anything, everyone may read (needs credentials); open =
                             anyone may do anything, the default ($ZOOKEEPER_ACL)`;

export const HELP = {
  main: `usage: fencekeeper <command> [options]

commands:
  run <lock> -- cmd [args...]      hold <lock> while cmd runs (FENCING_TOKEN in its environment)
  elect <name> -- cmd [args...]    campaign for <name>; run cmd while leader (FENCING_TOKEN = epoch)
  status <lock> [--watch]          the holder and the waiters of <lock>, in order, with their tokens
  migrate                          apply fencekeeper's tables to DATABASE_URL's database (idempotent)
  effects [--pending]              the effect ledger (withEffect); --pending: what awaits reconciling
  effects settle <resource> <key>  record a pending effect's outcome (--outcome happened|not-happened)
  demo                             play the paused-holder story against real servers

Run 'fencekeeper <command> --help' for a command's options;
'fencekeeper --version' (-V) prints the installed version.
Environment: FENCEKEEPER_LOCK_SERVICE (a lock service URL), ZOOKEEPER (connect string),
ZOOKEEPER_TLS_CA (and the other ZOOKEEPER_TLS_*), ZOOKEEPER_AUTH or ZOOKEEPER_AUTH_FILE
(digest credentials), DATABASE_URL, S3_ENDPOINT.

${EXIT_CODES}`,
  run: `usage: fencekeeper run <lock> [options] -- cmd [args...]

Acquire <lock> (a name like jobs/reindex), run cmd with FENCING_TOKEN,
FENCEKEEPER_SEQUENCER (the token bound to its lock: fk1:...) and
FENCEKEEPER_LOCK in its environment, release the lock when cmd exits, and
exit with cmd's code.

${STOPPING}

options:
${LOCK_SERVICE}
  --zookeeper <hosts>        connect string host:port[,host:port][/chroot] (default: $ZOOKEEPER)
  --timeout <ms>             give up after ms, the connect included: exit 75 when the lock
                             stayed held, 69 when the lock service did not answer in time
  --session-timeout <ms>     ZooKeeper session timeout to request (default 10000)
${ZOOKEEPER_SECURITY}
  --safety-margin <ms>       step down this long before the session can expire
                             (default: a quarter of the negotiated session timeout;
                             below two thirds of it)
  --grace <ms>               SIGTERM -> SIGKILL delay when the lock is lost
                             (default and maximum: half the safety margin; 0: SIGKILL at once)
  --lock-delay <ms>          ZooKeeper only: after a holder's session expired (or its node was
                             deleted) instead of a release, take the lock only ms later; a
                             clean release delays no one. Every participant of the lock must
                             pass it (one without it releases uncleanly). Default 0: off

${EXIT_CODES}`,
  elect: `usage: fencekeeper elect <name> [options] -- cmd [args...]

Campaign for leadership of <name>; when elected, run cmd with FENCING_TOKEN
(the leader's epoch), FENCEKEEPER_ELECTION and FENCEKEEPER_EPOCH in its
environment; resign when cmd exits, and exit with cmd's code.

${STOPPING.replace('the lock is lost', 'leadership is lost').replace('the lock is released', 'leadership is resigned')}

options:
${LOCK_SERVICE}
  --zookeeper <hosts>        connect string (default: $ZOOKEEPER)
  --id <id>                  this candidate's id (default hostname:pid)
  --session-timeout <ms>     ZooKeeper session timeout to request (default 10000)
${ZOOKEEPER_SECURITY}
  --safety-margin <ms>       step down this long before the session can expire
                             (default: a quarter of the negotiated session timeout)
  --grace <ms>               SIGTERM -> SIGKILL delay when leadership is lost
                             (default and maximum: half the safety margin)

${EXIT_CODES}`,
  status: `usage: fencekeeper status <lock> [options]

Print the holder of <lock> and its waiters in grant order, with their tokens
(the czxid of each queue node), owners and session ids.

options:
${LOCK_SERVICE}
  --zookeeper <hosts>        connect string (default: $ZOOKEEPER)
  --session-timeout <ms>     ZooKeeper session timeout to request (default 10000)
${ZOOKEEPER_SECURITY}
  --json                     one JSON object: { lock, queue: [{ role, token, owner, session, node }] }
  --watch                    print the listing again each time the queue changes (the lock
                             service's watch, no polling), until SIGINT or SIGTERM (exit 0);
                             a lost connection is reported on stderr and retried. With --json,
                             one object per line: { event: 'queue', lock, at, queue } and
                             { event: 'disconnected' | 'reconnected' | 'lost' | 'connected', lock, at, detail }

exit codes: 0 printed (--watch: stopped by SIGINT or SIGTERM); 64 usage; 69 ZooKeeper
could not be reached; 70 internal error`,
  migrate: `usage: fencekeeper migrate [--database-url <url>]

Apply fencekeeper's SQL migrations (the fence table, its tombstones, the
effect ledger and the Idempotency-Key responses) to the database at
--database-url or $DATABASE_URL, in the first schema of the connection's
search_path. Idempotent; safe to run from several processes at
once. Prints each migration it applied ("applied 001_fences.sql"), then
"up to date (N migrations)".

exit codes: 0 applied or up to date; 64 usage; 69 the database could not be
reached or refused the migration; 70 internal error`,
  effects: `usage: fencekeeper effects [--pending] [--json] [--resource <name>] [--older-than <ms>]
                         [--limit <n>] [--database-url <url>]

Print the effect ledger that withEffect() keeps in the database at
--database-url or $DATABASE_URL: each outside effect (a payment, an email)
with its state (pending, succeeded, failed), the token that recorded it and
the idempotency key the outside system saw. An effect stays pending when its
holder paused, died or lost its lock between recording the intent and
recording the outcome: ask the outside system whether that key happened,
then settle it (a withEffect call with a reconcile, or the settle command below).

       fencekeeper effects settle <resource> <key> --outcome happened|not-happened
                         [--database-url <url>]

Record what the outside system answered about a pending effect: happened
records it succeeded (with no result); not-happened records it failed
(abandoned: withEffect runs it again only with retryFailed, under a new
idempotency key). not-happened is refused until the recorded deadline plus
graceMs has passed, and always when no deadline was recorded: until then
the pending call may still land after you looked. An effect that is not
pending is refused too; a refusal changes nothing and exits 64.

options:
  --pending                  only the effects whose outcome is not recorded, longest pending first
  --json                     one JSON array of { resource, key, state, attempt, token,
                             idempotencyKey, deadline, graceMs, failure, createdAt, updatedAt }
  --resource <name>          only this resource's effects
  --older-than <ms>          only effects unchanged for at least this long
  --limit <n>                at most n (default 1000 without --pending; all pending with it)
  --database-url <url>       the database (default: $DATABASE_URL)

exit codes: 0 printed (settle: recorded); 64 usage, or settle refused; 69 the
database could not be reached or has no ledger (run 'fencekeeper migrate'); 70
internal error`,
  demo: `usage: fencekeeper demo [--unfenced] [--metrics] [--lock-service <url>] [--timeline <file.svg>]

Play the paused-holder story with real processes and real servers: holder A
acquires jobs/reindex and writes to a PostgreSQL row, an S3 object and an
HTTP service; A is frozen (SIGSTOP, as a long garbage-collection pause would
freeze it) past its session timeout; B acquires with a larger token and
writes; A resumes and writes with its old token. Every resource refuses A.
--unfenced makes the same writes without fencing. --metrics records
fencekeeper's OpenTelemetry metrics in every process (holders and the HTTP
service) and prints them at the end (needs @opentelemetry/api and
@opentelemetry/sdk-metrics installed). The demo draws its timeline, at the
times it recorded, as an SVG picture (the holders' lanes, the pause, the
grant's end, each write accepted or refused) and prints where: --timeline
names the file (default: one in the OS's temporary folder).

The lock comes from --lock-service (or $FENCEKEEPER_LOCK_SERVICE): any URL
'fencekeeper run --help' lists; by default the ZooKeeper of $ZOOKEEPER.
Servers from ZOOKEEPER (127.0.0.1:2181), DATABASE_URL, S3_ENDPOINT
(http://127.0.0.1:7480), S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION.
'npm run demo' starts them first.

exit codes: 0 every stale write was refused; 1 a stale write was accepted
(always with --unfenced); 64 usage; 69 a server could not be reached;
70 internal error`,
} as const;

export type HelpTopic = keyof typeof HELP;

export function isHelpTopic(name: string | undefined): name is HelpTopic {
  return name !== undefined && Object.hasOwn(HELP, name);
}
