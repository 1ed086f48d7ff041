/* A comm's QoS class from HcclCommConfig's hcclQos (form_int.h). */
#include "form/form_int.h"
#include "log.h"

#define QOS_LEVELS 8 /* hcclQos: 0..7 */

/* The class at position `rank` (0: the most favoured) of the policy's classes in priority order
 * (ties in the order the policy lists them). */
static int class_at(const qos_policy_t *q, int rank)
{
    for (int i = 0; i < q->ncls; i++) {
        int ahead = 0;
        for (int j = 0; j < q->ncls; j++)
            ahead += q->cls[j].priority < q->cls[i].priority ||
                     (q->cls[j].priority == q->cls[i].priority && j < i);
        if (ahead == rank)
            return i;
    }
    return q->default_cls;
}

int form_qos_class(const form_t *f, const form_client_t *c, int level_set, uint32_t level)
{
    const qos_policy_t *q = f->env.qos;

    if (!level_set || level >= QOS_LEVELS || q->ncls == 0)
        return c->qos_class;
    /* Level L asks for the class at floor((7 - L) * n / 8) of n in priority order. */
    int want = class_at(q, (int)((QOS_LEVELS - 1 - level) * (uint32_t)q->ncls / QOS_LEVELS));
    int ruled = c->ruled_class >= 0 && c->ruled_class < q->ncls ? c->ruled_class : c->qos_class;
    if (q->cls[want].priority >= q->cls[ruled].priority)
        return want;
    WARN("QOS", "pid %d asked for class %s for a comm (hcclQos %u); the rules give it %s", c->pid,
         q->cls[want].name, level, q->cls[ruled].name);
    return ruled;
}
