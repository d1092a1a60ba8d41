"""The provider side of Octavia's no-op provider driver, for tests.

Octavia's `noop_driver` accepts every request and never reports back, so a load balancer
would stay PENDING_CREATE (and a deleted one PENDING_DELETE) for ever. This loop plays a
provider that finishes at once: every half second it reads the load balancers, listeners,
pools and members whose provisioning status is PENDING_* from Octavia's database and reports them through the
driver agent's status socket (octavia_lib's DriverLibrary, the interface real providers
use), a second after the change: ACTIVE/ONLINE after a create or an update, DELETED after a delete. Octavia's own
driver agent writes the status.

argv: DATABASE_URL (mysql+pymysql://...) STATUS_SOCKET
"""
import sys
import time

import pymysql
from octavia_lib.api.drivers import driver_lib

url, status_socket = sys.argv[1], sys.argv[2]
rest = url.split('://', 1)[1]
creds, hostdb = rest.split('@', 1)
user, password = creds.split(':', 1)
hostport, db = hostdb.split('/', 1)
host, port = hostport.split(':', 1)
lib = driver_lib.DriverLibrary(status_socket=status_socket, stats_socket=status_socket + '.stats',
                               get_socket=status_socket + '.get')

while True:
    try:
        conn = pymysql.connect(host=host, port=int(port), user=user, password=password, database=db,
                               autocommit=True)
        with conn.cursor() as cur:
            # a second after the change: a test can see the PENDING_* state (and Octavia's 409).
            # Children first (listeners, pools, members), then the load balancer they lock.
            for table, key in (('listener', 'listeners'), ('pool', 'pools'), ('member', 'members'),
                               ('load_balancer', 'loadbalancers')):
                cur.execute(f"SELECT id, provisioning_status FROM {table} "
                            "WHERE provisioning_status LIKE 'PENDING\\_%%' "
                            "AND COALESCE(updated_at, created_at) < UTC_TIMESTAMP() - INTERVAL 1 SECOND")
                for obj_id, status in cur.fetchall():
                    done = status == 'PENDING_DELETE'
                    lib.update_loadbalancer_status({key: [{
                        'id': obj_id,
                        'provisioning_status': 'DELETED' if done else 'ACTIVE',
                        'operating_status': 'OFFLINE' if done else 'ONLINE',
                    }]})
                    print(f'{table} {obj_id}: {status} -> {"DELETED" if done else "ACTIVE"}', flush=True)
        conn.close()
    except Exception as e:  # the database or the agent not up yet: try again
        print(f'retry: {e}', flush=True)
    time.sleep(0.5)
