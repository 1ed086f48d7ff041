/* The admin socket: hccld-ctl asks, the daemon answers (status here, qos in qos_admin.c). */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server/events.h"
#include "server/server.h"
#include "server/status.h"
#include "server/topo.h"

static void send_status(server_t *srv, session_t *s, uint64_t req_id)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    status_t x;

    if (status_build(srv, &x) != 0)
        return;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_STATUS_RESP;
    m.status_resp = &x.r;
    /* A status of many clients may not fit one frame; then it is cut to what fits. */
    while (session_send(s, &m) != 0 && (x.r.n_clients > 0 || x.r.n_comms > 0)) {
        x.r.n_clients /= 2;
        x.r.n_comms /= 2;
    }
    status_free(&x);
}

static void send_topology(server_t *srv, session_t *s, uint64_t req_id)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__TopologyResp r = HCCLD__TOPOLOGY_RESP__INIT;

    if (topo_describe(srv->topo, &r) != 0)
        WARN("IPC", "no topology to describe (hwloc failed at start)");
    r.nic = srv->nic;
    r.pinned = srv->pinned;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_TOPOLOGY_RESP;
    m.topology_resp = &r;
    session_send(s, &m);
    topo_resp_free(&r);
}

void admin_handle(server_t *srv, session_t *s, const Hccld__Msg *m)
{
    switch (m->body_case) {
    case HCCLD__MSG__BODY_STATUS_REQ: send_status(srv, s, m->req_id); break;
    case HCCLD__MSG__BODY_QOS_REQ: qos_admin_handle(srv, s, m->req_id, m->qos_req); break;
    case HCCLD__MSG__BODY_TOPOLOGY_REQ: send_topology(srv, s, m->req_id); break;
    case HCCLD__MSG__BODY_WATCH_REQ: events_watch(srv, s, m->watch_req); break;
    case HCCLD__MSG__BODY_HELLO:
    case HCCLD__MSG__BODY_REJOIN: session_wrong_socket(s, m->req_id); break;
    default:
        WARN("IPC", "admin pid %d sent an unknown request (%d)", (int)s->fc.pid, (int)m->body_case);
        session_close(s);
        break;
    }
}
