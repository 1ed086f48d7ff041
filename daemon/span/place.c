/* Ranks to nodes and positions (see place.h). */
#include <errno.h>
#include <stdlib.h>

#include "span/place.h"

int span_place_init(span_place_t *p, const uint32_t *rank_node, uint32_t nranks, uint32_t nnodes)
{
    *p = (span_place_t){.nranks = nranks, .nnodes = nnodes};
    if (nnodes == 0 || (p->count = calloc(nnodes, sizeof(*p->count))) == NULL)
        return nnodes == 0 ? -EINVAL : -ENOMEM;
    for (uint32_t g = 0; g < nranks; g++) {
        if (rank_node[g] >= nnodes) {
            span_place_free(p);
            return -EINVAL;
        }
        p->count[rank_node[g]]++;
    }
    for (uint32_t i = 0; i < nnodes; i++) {
        if (p->count[i] == 0) {
            span_place_free(p);
            return -EINVAL;
        }
        p->L = p->count[i] > p->L ? p->count[i] : p->L;
    }
    p->node = malloc(nranks * sizeof(*p->node));
    p->pos = malloc(nranks * sizeof(*p->pos));
    p->pos_rank = malloc(nranks * sizeof(*p->pos_rank));
    p->first = malloc((nnodes + 1ull) * sizeof(*p->first));
    uint32_t *next = calloc(nnodes, sizeof(*next));
    if (p->node == NULL || p->pos == NULL || p->pos_rank == NULL || p->first == NULL ||
        next == NULL) {
        free(next);
        span_place_free(p);
        return -ENOMEM;
    }
    p->first[0] = 0;
    p->equal = 1;
    for (uint32_t i = 0; i < nnodes; i++) {
        p->first[i + 1] = p->first[i] + p->count[i];
        p->equal &= p->count[i] == p->L;
    }
    p->in_order = 1;
    for (uint32_t g = 0; g < nranks; g++) {
        uint32_t i = rank_node[g], j = next[i]++;
        p->node[g] = i;
        p->pos[g] = p->first[i] + j;
        p->pos_rank[p->pos[g]] = g;
        p->in_order &= p->pos[g] == g;
    }
    free(next);
    return 0;
}

void span_place_free(span_place_t *p)
{
    free(p->node);
    free(p->count);
    free(p->pos);
    free(p->pos_rank);
    free(p->first);
    *p = (span_place_t){0};
}
