/*
 * The daemon's figures in Prometheus' text exposition format (version 0.0.4): what
 * `hccld-ctl metrics` prints and what `hccld --metrics-listen` serves at /metrics, written by
 * one function so that the two never differ. Names: hccld_ prefix, _total counters, _bytes,
 * _seconds; labels class, comm, job, peer.
 */
#ifndef HCCLD_COMMON_METRICS_TEXT_H
#define HCCLD_COMMON_METRICS_TEXT_H

#include <stdio.h>

#include "hccld.pb-c.h"

/* Writes every family of r (and of q, the QoS classes, when not NULL) to f. */
void metrics_text(FILE *f, const Hccld__StatusResp *r, const Hccld__QosResp *q);

#endif
