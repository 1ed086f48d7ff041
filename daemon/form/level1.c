/* A rank's level-1 settings, taken from its request and checked by the engine (form_int.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "form/form_int.h"
#include "log.h"

int form_level1_take(form_level1_t *w, const char *algo, const char *algorithm, int by_config,
                     int deterministic, char *err, size_t cap, char *notice, size_t ncap)
{
    const char *name = by_config ? "hcclAlgo" : "HCCL_ALGO";

    algo = algo != NULL ? algo : "";
    algorithm = algorithm != NULL ? algorithm : "";
    notice[0] = '\0';
    memset(w, 0, sizeof(*w));
    if (strlen(algo) >= sizeof(w->algo) || strlen(algorithm) >= sizeof(w->algorithm))
        snprintf(err, cap, "%s is too long",
                 strlen(algo) >= sizeof(w->algo) ? name : "HCCL_ALGORITHM");
    else {
        snprintf(w->algo, sizeof(w->algo), "%s", algo);
        snprintf(w->algorithm, sizeof(w->algorithm), "%s", algorithm);
        w->by_config = by_config;
        w->deterministic = deterministic;
        engine_level1_t v = form_level1_view(w);
        if (engine_level1_check(&v, err, cap, notice, ncap) == 0) {
            if (notice[0] != '\0')
                WARN("INIT", "%s", notice);
            return 0;
        }
    }
    WARN("INIT", "%s=\"%.64s\" HCCL_ALGORITHM=\"%.32s\" refused: %s", name, algo, algorithm, err);
    return -EINVAL;
}

engine_level1_t form_level1_view(const form_level1_t *w)
{
    return (engine_level1_t){.algo = w->algo,
                             .algorithm = w->algorithm,
                             .algo_by_config = w->by_config,
                             .deterministic = w->deterministic};
}
