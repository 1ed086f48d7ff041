/*
 * The server's side of communicator formation (form/form.h): the effects formation asks for
 * (messages to clients and peer daemons, control connections, events, link names), the one
 * timer that runs its deadlines, and the client requests and peer messages it takes.
 */
#include <errno.h>
#include <sodium.h>
#include <stddef.h>

#include "form/lanes.h"
#include "hccl/hccl.h"
#include "log.h"
#include "server/events.h"
#include "server/link_mon.h"
#include "server/server.h"

static void rearm(server_t *srv);

static session_t *session_of(const form_client_t *c)
{
    return (session_t *)((char *)c - offsetof(session_t, fc));
}

static int op_client_send(void *ctx, const form_client_t *c, const Hccld__Msg *m, const int *fds,
                          int nfds)
{
    session_t *s = session_of(c);

    return nfds > 0 ? session_send_fds(s, m, fds, nfds) : session_send(s, m);
}

static int op_peer_send(void *ctx, void *link, const Hccld__Msg *m)
{
    return peer_send(link, m);
}

static void on_peer_msg(peer_t *p, const Hccld__Msg *m)
{
    server_t *srv = p->srv;

    form_peer_msg(srv->form, p, p->addr, p->job_id, m, uv_now(srv->loop));
    rearm(srv);
}

static void on_peer_gone(peer_t *p)
{
    form_link_gone(p->srv->form, p, p->addr);
    rearm(p->srv);
}

void formation_adopt(peer_t *p)
{
    p->on_msg = on_peer_msg;
    p->on_gone = on_peer_gone;
}

static void on_link_ready(peer_t *p, HcclResult result)
{
    server_t *srv = p->srv;

    if (result == HCCL_SUCCESS)
        formation_adopt(p);
    form_link_ready(srv->form, p, result, uv_now(srv->loop));
    rearm(srv);
}

static void *op_peer_connect(void *ctx, const char *addr, const uint8_t *job_id, const uint8_t *key,
                             unsigned timeout_ms, int agreed)
{
    peer_t *p = peer_connect(ctx, addr, job_id, key, timeout_ms, on_link_ready, NULL);

    if (p != NULL)
        p->agreed = agreed;
    return p;
}

static void op_peer_close(void *ctx, void *link)
{
    peer_t *p = link;

    p->on_ready = NULL;
    p->on_msg = NULL;
    p->on_gone = NULL;
    peer_close(p);
}

static void op_comm_formed(void *ctx, const form_comm_t *c)
{
    events_comm_formed(ctx, c);
}

static void op_rank_died(void *ctx, const form_comm_t *c, uint32_t rank, int pid)
{
    events_rank_died(ctx, c, rank, pid);
}

static void op_comm_broken(void *ctx, const form_comm_t *c, const char *why, HcclResult result)
{
    events_comm_broken(ctx, c, why, result);
}

static void op_peer_lost(void *ctx, const char *addr, const char *why)
{
    events_peer(ctx, addr, 1, why);
}

static void op_name_link(void *ctx, const char *data_addr, const char *node)
{
    link_mon_name(((server_t *)ctx)->links, data_addr, node);
}

static int op_is_self(void *ctx, const char *addr)
{
    server_t *srv = ctx;

    return addr_is_self(srv->cfg.listen, srv->advertised, addr);
}

static const form_ops_t ops = {.client_send = op_client_send,
                               .peer_send = op_peer_send,
                               .peer_connect = op_peer_connect,
                               .peer_close = op_peer_close,
                               .comm_formed = op_comm_formed,
                               .rank_died = op_rank_died,
                               .comm_broken = op_comm_broken,
                               .peer_lost = op_peer_lost,
                               .name_link = op_name_link,
                               .is_self = op_is_self};

static void on_form_timer(uv_timer_t *t);

/* After every call into formation: its next deadline may have moved. */
static void rearm(server_t *srv)
{
    uint64_t at = srv->form != NULL ? form_next_deadline(srv->form) : UINT64_MAX;
    uint64_t now = uv_now(srv->loop);

    if (at == UINT64_MAX)
        uv_timer_stop(&srv->form_timer);
    else
        uv_timer_start(&srv->form_timer, on_form_timer, at > now ? at - now : 0, 0);
}

static void on_form_timer(uv_timer_t *t)
{
    server_t *srv = t->data;

    form_expire(srv->form, uv_now(srv->loop));
    rearm(srv);
}

int formation_start(server_t *srv)
{
    form_env_t env = {.eng = srv->eng,
                      .qos = &srv->qos,
                      .chunk_bytes = srv->cfg.chunk_bytes,
                      .l0_mode = srv->cfg.l0_mode,
                      .socket_path = srv->cfg.socket_path,
                      .advertised = srv->advertised,
                      .data_addr = srv->data_addr,
                      .rdma_addr = srv->rdma_addr,
                      /* A restarted daemon must not hand out the ids of the comms
                       * whose ranks come back to it (form/rejoin.c). */
                      .comm_id_base = randombytes_random()};

    if ((srv->form = form_new(&env, &ops, srv)) == NULL)
        return -ENOMEM;
    uv_timer_init(srv->loop, &srv->form_timer);
    srv->form_timer.data = srv;
    return 0;
}

void formation_stop(server_t *srv)
{
    form_free(srv->form);
    srv->form = NULL;
    uv_close((uv_handle_t *)&srv->form_timer, NULL);
}

static void answer_destroy(session_t *s, uint64_t req_id, const Hccld__CommDestroyReq *req)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__CommDestroyResp r = HCCLD__COMM_DESTROY_RESP__INIT;

    lane_count_fold(s->srv); /* its last lane ops, before it leaves */
    r.result = form_comm_leave(s->srv->form, &s->fc, req->comm_id, req->rank);
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_COMM_DESTROY_RESP;
    m.comm_destroy_resp = &r;
    session_send(s, &m);
}

static void answer_health(session_t *s, uint64_t req_id, const Hccld__CommHealthReq *req)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__CommHealthResp r = HCCLD__COMM_HEALTH_RESP__INIT;
    int ready = 0;

    r.result = form_comm_health(s->srv->form, &s->fc, req->comm_id, req->rank, &ready);
    r.ready = ready;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_COMM_HEALTH_RESP;
    m.comm_health_resp = &r;
    session_send(s, &m);
}

#define LANE_SOCKETS_MAX 8

static void answer_lane_sockets(session_t *s, uint64_t req_id, const Hccld__LaneSocketsReq *req)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__LaneSocketsResp r = HCCLD__LANE_SOCKETS_RESP__INIT;
    int fds[LANE_SOCKETS_MAX], n = (int)req->count;

    r.result = HCCL_E_PARA;
    if (req->count >= 1 && req->count <= LANE_SOCKETS_MAX)
        r.result =
            lane_sockets_make(s->srv->data_addr, fds, n) == 0 ? HCCL_SUCCESS : HCCL_E_UNAVAIL;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_LANE_SOCKETS_RESP;
    m.lane_sockets_resp = &r;
    if (r.result != HCCL_SUCCESS) {
        session_send(s, &m);
        return;
    }
    if (session_send_fds(s, &m, fds, n) != 0) { /* the rank asks again */
        r.result = HCCL_E_UNAVAIL;
        session_send(s, &m);
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

int formation_request(session_t *s, const Hccld__Msg *m)
{
    server_t *srv = s->srv;
    uint64_t now = uv_now(srv->loop);

    switch (m->body_case) {
    case HCCLD__MSG__BODY_ROOT_INFO_REQ:
        form_root_info(srv->form, &s->fc, m->req_id, m->root_info_req, now);
        break;
    case HCCLD__MSG__BODY_COMM_INIT_REQ:
        form_comm_init(srv->form, &s->fc, m->req_id, m->comm_init_req, now);
        break;
    case HCCLD__MSG__BODY_COMM_SPLIT_REQ:
        form_comm_split(srv->form, &s->fc, m->req_id, m->comm_split_req, now);
        break;
    case HCCLD__MSG__BODY_COMM_DESTROY_REQ:
        answer_destroy(s, m->req_id, m->comm_destroy_req);
        break;
    case HCCLD__MSG__BODY_COMM_HEALTH_REQ: answer_health(s, m->req_id, m->comm_health_req); break;
    case HCCLD__MSG__BODY_LANE_SOCKETS_REQ:
        answer_lane_sockets(s, m->req_id, m->lane_sockets_req);
        break;
    case HCCLD__MSG__BODY_COMM_REJOIN_REQ: {
        int fd = m->comm_rejoin_req->coop ? session_take_fd(s) : -1;
        form_comm_rejoin(srv->form, &s->fc, m->req_id, m->comm_rejoin_req, fd, now);
        break;
    }
    default: return -EPROTO;
    }
    rearm(srv);
    return 0;
}

void formation_session_gone(session_t *s)
{
    if (s->srv->form == NULL)
        return;
    lane_count_fold(s->srv); /* what its ranks counted, before its segment goes */
    form_client_gone(s->srv->form, &s->fc);
    rearm(s->srv);
}

int formation_key_for(server_t *srv, const uint8_t *job_id, uint8_t *key)
{
    return srv->form != NULL ? form_key_for(srv->form, job_id, key) : -ENOENT;
}
