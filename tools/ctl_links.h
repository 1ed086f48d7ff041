/* hccld-ctl links [--json]: the link monitor's last sample (daemon/server/link_mon.h). */
#ifndef HCCLD_TOOLS_CTL_LINKS_H
#define HCCLD_TOOLS_CTL_LINKS_H

#include "hccld.pb-c.h"

void ctl_links_print(const Hccld__StatusResp *r, int json);

#endif
