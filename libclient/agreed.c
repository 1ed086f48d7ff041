/* Agreed jobs: ids and keys every rank derives alike (BLAKE2b), and the join that uses them. */
#include "agreed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "log.h"

#define JOB_KEY_HEX 32

/* Agreed inits this process made: the n-th comm from the same facts is another job. */
static uint64_t agreed_inits;
static int public_key_warned;

void hc_facts_init(hc_facts_t *f, const char *kind)
{
    /* Idempotent and thread-safe; it only picks implementations, BLAKE2b needs no randomness. */
    if (sodium_init() < 0)
        WARN("INIT", "sodium_init() failed; hashing with the portable code");
    crypto_generichash_init(&f->st, NULL, 0, crypto_generichash_BYTES);
    hc_facts_str(f, "hcclD agreed job v1");
    hc_facts_str(f, kind);
}

void hc_facts_add(hc_facts_t *f, const void *p, size_t n)
{
    uint8_t len[8];

    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    crypto_generichash_update(&f->st, len, sizeof(len));
    crypto_generichash_update(&f->st, p, n);
}

void hc_facts_str(hc_facts_t *f, const char *s)
{
    hc_facts_add(f, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

void hc_facts_u64(hc_facts_t *f, uint64_t v)
{
    uint8_t b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    hc_facts_add(f, b, sizeof(b));
}

/* out = BLAKE2b-128, keyed with key (NULL: unkeyed), of label (with its NUL) and in. */
static void h16(const uint8_t *key, const char *label, const uint8_t *in, size_t n, uint8_t *out)
{
    crypto_generichash_state st;

    crypto_generichash_init(&st, key, key != NULL ? HC_JOB_BYTES : 0, HC_JOB_BYTES);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label) + 1);
    crypto_generichash_update(&st, in, n);
    crypto_generichash_final(&st, out, HC_JOB_BYTES);
}

/* HCCL_JOB_KEY: 32 hex digits, the same on every rank. 1 if set, 0 if not, -1 if malformed. */
static int job_secret(uint8_t *secret)
{
    const char *s = getenv("HCCL_JOB_KEY");

    if (s == NULL || *s == '\0')
        return 0;
    if (strlen(s) != JOB_KEY_HEX || hex_decode(s, secret, HC_JOB_BYTES) != HC_JOB_BYTES) {
        ERR("INIT", "HCCL_JOB_KEY must be %d hex digits (16 random bytes, the same on every rank)",
            JOB_KEY_HEX);
        return -1;
    }
    return 1;
}

HcclResult hc_job_derive(hc_facts_t *f, const char *guard, uint8_t *id, uint8_t *key)
{
    uint8_t facts[crypto_generichash_BYTES], secret[HC_JOB_BYTES];
    int have = job_secret(secret);

    if (have < 0)
        return HCCL_E_PARA;
    hc_facts_u64(f, __atomic_fetch_add(&agreed_inits, 1, __ATOMIC_RELAXED));
    crypto_generichash_final(&f->st, facts, sizeof(facts));
    h16(NULL, "hcclD job id", facts, sizeof(facts), id);
    if (have) {
        h16(secret, "hcclD job key", id, HC_JOB_BYTES, key);
        sodium_memzero(secret, sizeof(secret));
        return HCCL_SUCCESS;
    }
    /* Different from the id's hash: the id crosses the network in clear, the key never does. */
    h16(NULL, "hcclD public job key", facts, sizeof(facts), key);
    if (!__atomic_exchange_n(&public_key_warned, 1, __ATOMIC_RELAXED))
        WARN("INIT",
             "HCCL_JOB_KEY is not set: the job key is derived from %s, so the job is "
             "protected only by the secrecy of %s and by HCCL_WHITELIST_FILE on the "
             "daemons; set HCCL_JOB_KEY (32 random hex digits, the same on every rank)",
             guard, guard);
    return HCCL_SUCCESS;
}

void hc_split_derive(const uint8_t *parent_id, const uint8_t *parent_key, uint64_t seq,
                     uint32_t color, uint8_t *id, uint8_t *key)
{
    uint8_t facts[crypto_generichash_BYTES];
    hc_facts_t f;

    hc_facts_init(&f, "split");
    hc_facts_add(&f, parent_id, HC_JOB_BYTES);
    hc_facts_u64(&f, seq);
    hc_facts_u64(&f, color);
    crypto_generichash_final(&f.st, facts, sizeof(facts));
    h16(NULL, "hcclD job id", facts, sizeof(facts), id);
    /* Keyed with the parent's key: only the parent's ranks can know the child's. */
    h16(parent_key, "hcclD split key", id, HC_JOB_BYTES, key);
}

HcclResult hc_init_agreed(hc_client_t *c, const uint8_t *id, const uint8_t *key, const char *root,
                          uint32_t n, uint32_t rank, const uint8_t *parent_job,
                          const hc_comm_cfg_t *cfg, HcclComm *comm)
{
    Hccld__RootInfo ri = HCCLD__ROOT_INFO__INIT;
    char hex[2 * HC_JOB_BYTES + 1];

    ri.version = 1;
    ri.job_id.data = (uint8_t *)id;
    ri.job_id.len = HC_JOB_BYTES;
    ri.job_key.data = (uint8_t *)key;
    ri.job_key.len = HC_JOB_BYTES;
    ri.root_addr = (char *)root;
    ri.root_socket = "";
    hex_encode(id, HC_JOB_BYTES, hex);
    INFO("INIT", "rank %u of %u: agreed job %s, root daemon %s", rank, n, hex,
         root[0] ? root : "(this one)");
    return hc_comm_init(c, &ri, n, rank, 1, parent_job, cfg, comm);
}
