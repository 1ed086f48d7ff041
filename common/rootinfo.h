/*
 * HcclRootInfo.internal holds "HCRI", a 4-byte little-endian length and a serialized
 * hccld.RootInfo; the rest is zero. Unpacking checks all of it: root infos travel through
 * launchers and environment variables.
 */
#ifndef HCCLD_COMMON_ROOTINFO_H
#define HCCLD_COMMON_ROOTINFO_H

#include "hccl/hccl.h"
#include "hccld.pb-c.h"

#define ROOTINFO_ID_BYTES 16
#define ROOTINFO_KEY_BYTES 16

/* 0, or -EMSGSIZE if it does not fit. */
int rootinfo_pack(const Hccld__RootInfo *ri, HcclRootInfo *out);
/* A decoded RootInfo (free with hccld__root_info__free_unpacked), or NULL if malformed. */
Hccld__RootInfo *rootinfo_unpack(const HcclRootInfo *in);
/* The used prefix of the packed form, for hex in HCCL_ROOT_INFO. */
size_t rootinfo_packed_len(const HcclRootInfo *in);

#endif
