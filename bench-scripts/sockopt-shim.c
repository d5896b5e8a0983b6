/* LD_PRELOAD shim for the yardstick (blast), which takes no -C or -M: every TCP socket
 * it creates gets TCP_CONGESTION from $SHIM_CC and TCP_MAXSEG from $SHIM_MSS (either
 * may be unset), so it runs under the same congestion control and segment size as the
 * tools beside it. Accepted sockets inherit both from the listener.
 *
 *   gcc -O2 -shared -fPIC -o /tmp/sockopt-shim.so bench-scripts/sockopt-shim.c -ldl
 *   SHIM_CC=cubic SHIM_MSS=1448 LD_PRELOAD=/tmp/sockopt-shim.so blast -c ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int socket(int domain, int type, int protocol) {
  static int (*real)(int, int, int);
  if (!real) real = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
  int fd = real(domain, type, protocol);
  if (fd < 0 || (domain != AF_INET && domain != AF_INET6) || (type & 0xf) != SOCK_STREAM) return fd;
  const char *cc = getenv("SHIM_CC"), *mss = getenv("SHIM_MSS");
  if (cc && *cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc)) != 0)
    perror("sockopt-shim: TCP_CONGESTION");
  if (mss && *mss) {
    int m = atoi(mss);
    if (setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &m, sizeof m) != 0) perror("sockopt-shim: TCP_MAXSEG");
  }
  return fd;
}
