/*
 * What the ranks of a comm across daemons keep for a restart of their daemon (issue 37, part
 * 3): the daemon's part of the comm as it formed, a packed SpanRecord (proto/hccld.proto) that
 * each rank receives with its init answer and hands back to the next daemon with its
 * CommRejoinReq. Nothing of it survives in the daemon: a crash loses nothing the ranks do not
 * hold. The record holds the job key, which the ranks know anyway (their root info); a record
 * is checked as a membership from another daemon is, so a rank can spoil only its own job.
 *
 * The next daemon forms the comm from it under its old id, as the node that came back: it
 * dials every other node, which held the comm's ops since the drain (span/drain.c) and waits
 * for it (span_spec_t.returning).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "form/form_int.h"
#include "log.h"

int form_record_make(form_comm_t *c, const char *const *data_nodes, const uint32_t *rank_node,
                     uint32_t nnodes, uint32_t me, const uint8_t *job_id, const uint8_t *key,
                     const multinode_opts_t *o, const char *qos_name)
{
    Hccld__SpanRecord sr = HCCLD__SPAN_RECORD__INIT;
    Hccld__Membership m = HCCLD__MEMBERSHIP__INIT;
    const form_level1_t none = {0}, *w = o->want != NULL ? o->want : &none;

    m.result = HCCL_SUCCESS;
    m.message = "";
    m.nranks = c->nranks;
    m.n_nodes = m.n_data_nodes = nnodes;
    m.nodes = (char **)o->nodes;
    m.data_nodes = (char **)data_nodes;
    if (o->rdma_nodes != NULL) {
        m.n_rdma_nodes = nnodes;
        m.rdma_nodes = (char **)o->rdma_nodes;
    }
    if (o->nodes == NULL)
        m.n_nodes = 0;
    m.n_rank_node = c->nranks;
    m.rank_node = (uint32_t *)rank_node;
    m.qos_class = (char *)qos_name;
    if (o->retry != NULL)
        form_retry_put(o->retry, &m);
    sr.membership = &m;
    sr.me = me;
    sr.job_id = (ProtobufCBinaryData){.data = (uint8_t *)job_id, .len = SHARE_JOB_BYTES};
    sr.job_key = (ProtobufCBinaryData){.data = (uint8_t *)key, .len = AUTH_KEY_BYTES};
    sr.algo = (char *)w->algo;
    sr.algorithm = (char *)w->algorithm;
    sr.algo_by_config = w->by_config;
    sr.deterministic = w->deterministic;
    sr.log_ops = o->log_ops;
    sr.connect_timeout_s = o->connect_timeout_s;
    size_t len = hccld__span_record__get_packed_size(&sr);
    if ((c->record = malloc(len)) == NULL)
        return -1;
    c->record_len = hccld__span_record__pack(&sr, c->record);
    return 0;
}

Hccld__SpanRecord *form_record_read(const uint8_t *data, size_t len, uint32_t nranks,
                                    const char **why)
{
    Hccld__SpanRecord *sr = hccld__span_record__unpack(NULL, len, data);
    const Hccld__Membership *m = sr != NULL ? sr->membership : NULL;

    *why = "its record of the comm across daemons is not one";
    if (m == NULL || m->nranks != nranks || m->n_rank_node != nranks || m->n_data_nodes < 2 ||
        m->n_data_nodes > FORM_MAX_RANKS || sr->me >= m->n_data_nodes ||
        (m->n_nodes != 0 && m->n_nodes != m->n_data_nodes) ||
        (m->n_rdma_nodes != 0 && m->n_rdma_nodes != m->n_data_nodes) ||
        sr->job_id.len != SHARE_JOB_BYTES || sr->job_key.len != AUTH_KEY_BYTES ||
        strlen(sr->algo) >= ENGINE_ALGO_MAX || strlen(sr->algorithm) >= ENGINE_ALGORITHM_MAX) {
        if (sr != NULL)
            hccld__span_record__free_unpacked(sr, NULL);
        return NULL;
    }
    for (uint32_t r = 0; r < nranks; r++)
        if (m->rank_node[r] >= m->n_data_nodes) {
            hccld__span_record__free_unpacked(sr, NULL);
            return NULL;
        }
    *why = NULL;
    return sr;
}

HcclResult form_record_comm(form_t *f, form_comm_t *c, const Hccld__SpanRecord *sr,
                            const uint64_t *p2p_next, uint64_t coll_below, const char **why)
{
    const Hccld__Membership *m = sr->membership;
    form_level1_t want = {.by_config = sr->algo_by_config, .deterministic = sr->deterministic};
    form_retry_t retry;

    snprintf(want.algo, sizeof(want.algo), "%s", sr->algo);
    snprintf(want.algorithm, sizeof(want.algorithm), "%s", sr->algorithm);
    form_retry_get(&retry, m);
    return form_comm_multinode(
        f, c, (const char *const *)m->data_nodes, m->rank_node, (uint32_t)m->n_data_nodes,
        sr->job_id.data, sr->job_key.data,
        &(multinode_opts_t){.want = &want,
                            .log_ops = sr->log_ops,
                            .qos_class = form_membership_class(f, m),
                            .plan = NULL,
                            .rdma_nodes =
                                m->n_rdma_nodes != 0 ? (const char *const *)m->rdma_nodes : NULL,
                            .nodes = m->n_nodes != 0 ? (const char *const *)m->nodes : NULL,
                            .connect_timeout_s = sr->connect_timeout_s,
                            .retry = &retry,
                            .returning = 1,
                            .p2p_next = p2p_next,
                            .coll_below = coll_below},
        why);
}
