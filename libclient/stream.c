#include "stream.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "prof.h"
#include "thread.h"

struct HcclStreamDef {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    hc_call_t *head, *tail;
    int running; /* a call is executing */
    int stop;
    HcclResult err; /* first error since the last synchronize */
    pthread_t thread;
};

/* Frees what the call owns (not the call itself). */
static void call_release(hc_call_t *call)
{
    free(call->counts);
    free(call->ops);
    call->counts = NULL;
    call->ops = NULL;
}

static HcclResult call_run(hc_call_t *call)
{
    hc_comm_t *c = call->comm;
    uint32_t n = c->nranks;

    if (call->nops > 0)
        return hc_ops_run(c, call->ops, call->nops);
    if (!call->alltoallv)
        return hc_ops_run(c, &call->op, 1);
    HcclResult rc =
        hc_alltoallv_run(c, call->op.send, call->counts, call->counts + n, call->op.recv,
                         call->counts + 2 * n, call->counts + 3 * n, call->op.dtype);
    if (rc != HCCL_SUCCESS)
        hc_comm_set_error(c, rc);
    return rc;
}

/* Runs the call, with a profile record when HCCL_PROF_ENABLE asks for them, and lets go of
 * its comm (hc_dispatch took it). A call on a comm being aborted fails at once, or as soon as
 * the abort reaches it, with HCCL_E_SUSPENDING. */
static HcclResult call_exec(hc_call_t *call)
{
    hc_comm_t *c = call->comm;
    hc_prof_acc_t acc;
    HcclResult rc;

    if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
        rc = HCCL_E_SUSPENDING;
    else if (hc_client_dead(c->c))
        rc = HCCL_E_UNAVAIL; /* the daemon went away: nothing runs without it */
    else if (!hc_prof_enabled())
        rc = call_run(call);
    else {
        hc_prof_begin(&acc, call);
        rc = call_run(call);
        hc_prof_end(&acc, call, rc);
    }
    if (rc != HCCL_SUCCESS && __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
        rc = HCCL_E_SUSPENDING;
    __atomic_sub_fetch(&c->users, 1, __ATOMIC_ACQ_REL);
    return rc;
}

static void *stream_main(void *arg)
{
    HcclStream s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->cv, &s->lock);
        if (s->head == NULL)
            break;
        hc_call_t *call = s->head;
        s->running = 1;
        pthread_mutex_unlock(&s->lock);
        HcclResult rc = call_exec(call);
        pthread_mutex_lock(&s->lock);
        s->head = call->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->running = 0;
        if (s->err == HCCL_SUCCESS)
            s->err = rc;
        call_release(call);
        free(call);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

HcclResult hc_dispatch(hc_call_t *call, HcclStream s)
{
    hc_call_t *copy;

    /* HcclCommAbort waits until no call holds the comm. */
    __atomic_add_fetch(&call->comm->users, 1, __ATOMIC_ACQ_REL);
    if (s == NULL) {
        HcclResult rc = call_exec(call);
        call_release(call);
        return rc;
    }
    if ((copy = malloc(sizeof(*copy))) == NULL) {
        call_release(call);
        __atomic_sub_fetch(&call->comm->users, 1, __ATOMIC_ACQ_REL);
        return HCCL_E_MEMORY;
    }
    *copy = *call;
    copy->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail != NULL)
        s->tail->next = copy;
    else
        s->head = copy;
    s->tail = copy;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
    return HCCL_SUCCESS;
}

HcclResult HcclStreamCreate(HcclStream *stream)
{
    HcclStream s;

    if (stream == NULL)
        return HCCL_E_PTR;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return HCCL_E_MEMORY;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (thread_start(&s->thread, NULL, stream_main, s) != 0) {
        ERR("INIT", "pthread_create() for a stream failed");
        free(s);
        return HCCL_E_SYSCALL;
    }
    *stream = s;
    return HCCL_SUCCESS;
}

HcclResult HcclStreamSynchronize(HcclStream s)
{
    HcclResult rc;

    if (s == NULL)
        return HCCL_E_PTR;
    pthread_mutex_lock(&s->lock);
    while (s->head != NULL)
        pthread_cond_wait(&s->cv, &s->lock);
    rc = s->err;
    s->err = HCCL_SUCCESS;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

HcclResult HcclStreamQuery(HcclStream s)
{
    HcclResult rc;

    if (s == NULL)
        return HCCL_E_PTR;
    pthread_mutex_lock(&s->lock);
    rc = s->head != NULL ? HCCL_E_AGAIN : s->err;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

HcclResult HcclStreamDestroy(HcclStream s)
{
    if (s == NULL)
        return HCCL_E_PTR;
    /* Like a device stream, destruction lets queued work finish first. */
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cv);
    free(s);
    return HCCL_SUCCESS;
}
