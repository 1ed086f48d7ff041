/* The answers to a rank's init or split (form_int.h): an error, or its comm, with the shared
 * segments or lane sockets it needs. */
#include <unistd.h>

#include "auth.h"
#include "form/form_int.h"
#include "log.h"
#include "uds.h"

int form_send(form_t *f, const form_client_t *c, uint64_t req_id, Hccld__CommInitResp *r,
              const int *fds, int nfds)
{
    Hccld__Msg m = HCCLD__MSG__INIT;

    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_COMM_INIT_RESP;
    m.comm_init_resp = r;
    return f->ops->client_send(f->ctx, c, &m, fds, nfds);
}

void form_answer_result(form_t *f, const form_client_t *c, uint64_t req_id, HcclResult result,
                        const char *why, uint32_t nranks, uint32_t rank)
{
    Hccld__CommInitResp r = HCCLD__COMM_INIT_RESP__INIT;

    r.result = result;
    r.message = (char *)(why ? why : "");
    r.nranks = nranks;
    r.rank = rank;
    form_send(f, c, req_id, &r, NULL, 0);
}

void form_answer_multinode(form_t *f, const form_client_t *c, uint64_t req_id,
                           const form_comm_t *fc, uint32_t rank, uint64_t chunk, const char *notice,
                           lane_offer_t *lane, const lanes_info_t *ln)
{
    Hccld__CommInitResp r = HCCLD__COMM_INIT_RESP__INIT;
    uint8_t lane_key[AUTH_DERIVED_BYTES];
    int fds[UDS_MAX_FDS], nfds = 0;

    r.result = HCCL_SUCCESS;
    r.message = "";
    r.comm_id = fc->id;
    r.nranks = fc->nranks;
    r.rank = rank;
    r.chunk_bytes = chunk;
    r.nnodes = fc->nnodes;
    r.notice = (char *)(notice != NULL ? notice : "");
    r.qos_class = (char *)f->env.qos->cls[fc->qos_class].name;
    if (fc->record != NULL) {
        r.resume_token.data = (uint8_t *)fc->secret;
        r.resume_token.len = sizeof(fc->secret);
        r.span_record.data = fc->record;
        r.span_record.len = fc->record_len;
    }
    if (ln != NULL && ln->direct_max > 0)
        nfds = lanes_answer(lane, ln->addrs, fc->nranks, rank, ln->direct_max, ln->key, lane_key,
                            &r, fds, UDS_MAX_FDS);
    if (nfds < 0) {
        form_answer_result(f, c, req_id, HCCL_E_TCP_CONNECT,
                           "could not make the rank's lane sockets", fc->nranks, rank);
    } else if (form_send(f, c, req_id, &r, nfds > 0 ? fds : NULL, nfds) != 0 && nfds > 0) {
        /* Its peers connect to it in vain and fail their init within the timeout. */
        ERR("INIT", "comm %u: could not pass the lane sockets to rank %u", fc->id, rank);
        form_answer_result(f, c, req_id, HCCL_E_INTERNAL, "could not pass the lane sockets",
                           fc->nranks, rank);
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
}
