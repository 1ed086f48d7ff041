/* HCCL_WHITELIST_FILE: {"host_ip": ["10.0.0.1", ...]}; when set, only those addresses may
 * connect as peer daemons. Parsed with jansson. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server/server.h"

int whitelist_load(server_t *srv, const char *path)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err), *list, *v;
    size_t i;

    if (root == NULL) {
        ERR("INIT", "HCCL_WHITELIST_FILE %s: %s (line %d)", path, err.text, err.line);
        return -1;
    }
    list = json_object_get(root, "host_ip");
    if (!json_is_array(list)) {
        ERR("INIT", "HCCL_WHITELIST_FILE %s: no \"host_ip\" array", path);
        json_decref(root);
        return -1;
    }
    srv->whitelist = calloc(json_array_size(list) + 1, sizeof(char *));
    json_array_foreach(list, i, v)
    {
        if (srv->whitelist != NULL && json_is_string(v))
            srv->whitelist[srv->nwhitelist++] = strdup(json_string_value(v));
    }
    json_decref(root);
    INFO("INIT", "peer whitelist: %zu addresses from %s", srv->nwhitelist, path);
    return srv->whitelist != NULL ? 0 : -1;
}

int whitelist_allows(const server_t *srv, const char *ip)
{
    if (srv->whitelist == NULL)
        return 1;
    for (size_t i = 0; i < srv->nwhitelist; i++)
        if (strcmp(srv->whitelist[i], ip) == 0)
            return 1;
    return 0;
}
