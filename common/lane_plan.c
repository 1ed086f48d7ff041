/* The lane allreduce's schedule (lane_plan.h). */
#include "lane_plan.h"

void lane_plan(uint32_t n, uint32_t me, lane_plan_t *p)
{
    uint32_t pow2 = 1, levels = 0;

    while (pow2 <= n / 2) {
        pow2 *= 2;
        levels++;
    }
    *p = (lane_plan_t){.n = n, .me = me, .pow2 = pow2, .rem = n - pow2, .levels = levels};
    p->fold = UINT32_MAX;
    if (me < 2 * p->rem) {
        p->extra = me % 2 == 0;
        p->fold = p->extra ? me + 1 : me - 1;
        p->vme = me / 2;
    } else {
        p->vme = me - p->rem;
    }
}

uint32_t lane_plan_real(const lane_plan_t *p, uint32_t v)
{
    return v < p->rem ? 2 * v + 1 : v + p->rem;
}

uint32_t lane_plan_partner(const lane_plan_t *p, uint32_t l)
{
    return lane_plan_real(p, p->vme ^ (1u << l));
}

uint32_t lane_plan_up(uint32_t n, uint32_t me)
{
    lane_plan_t p;
    uint32_t k = 0;

    lane_plan(n, me, &p);
    k += p.fold != UINT32_MAX && p.fold > me;
    for (uint32_t l = 0; !p.extra && l < p.levels; l++)
        k += lane_plan_partner(&p, l) > me;
    return k;
}
