/*
 * LD_PRELOAD shim: TensorFlow's gRPC server hard-codes the wildcard address
 * ("0.0.0.0:<port>" in grpc_server_lib.cc), so a tf.distribute.Server would
 * listen on every interface of the node.  The server accepts any graph from
 * anyone who can reach it, so picluster narrows its listening socket to the
 * cluster address.  Only binds to the wildcard address on the ports named in
 * PICLUSTER_BIND_PORT (one port, or several separated by commas: a process
 * that hosts several tasks) are rewritten, to PICLUSTER_BIND_ADDR (IPv4).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

/* Whether port is one of the comma-separated ports in list. */
static int listed(const char *list, int port) {
    for (;;) {
        char *end;
        long p = strtol(list, &end, 10);
        if (end == list) return 0;
        if (p == port) return 1;
        if (*end != ',') return 0;
        list = end + 1;
    }
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");

    const char *want_addr = getenv("PICLUSTER_BIND_ADDR");
    const char *want_port = getenv("PICLUSTER_BIND_PORT");
    if (!want_addr || !want_port || !addr) return real_bind(fd, addr, len);
    struct in_addr v4;
    if (inet_pton(AF_INET, want_addr, &v4) != 1) return real_bind(fd, addr, len);

    if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in sin;
        memcpy(&sin, addr, sizeof sin);
        if (listed(want_port, ntohs(sin.sin_port)) && sin.sin_addr.s_addr == htonl(INADDR_ANY)) {
            sin.sin_addr = v4;
            return real_bind(fd, (const struct sockaddr *)&sin, sizeof sin);
        }
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, addr, sizeof sin6);
        if (listed(want_port, ntohs(sin6.sin6_port)) &&
            memcmp(&sin6.sin6_addr, &in6addr_any, sizeof in6addr_any) == 0) {
            /* A dual-stack socket reaches an IPv4 address through its mapped form. */
            memset(&sin6.sin6_addr, 0, sizeof sin6.sin6_addr);
            sin6.sin6_addr.s6_addr[10] = 0xff;
            sin6.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&sin6.sin6_addr.s6_addr[12], &v4, 4);
            return real_bind(fd, (const struct sockaddr *)&sin6, sizeof sin6);
        }
    }
    return real_bind(fd, addr, len);
}
