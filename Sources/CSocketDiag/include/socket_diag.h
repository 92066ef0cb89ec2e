#ifndef SCOPEPROXY_SOCKET_DIAG_H
#define SCOPEPROXY_SOCKET_DIAG_H

/// The uid owning the TCP socket whose local end is (local, local_port) and whose remote end is
/// (remote, remote_port), asked of the kernel for that one socket (NETLINK_SOCK_DIAG, what `ss`
/// uses): no table is read. `family` is AF_INET (4-byte addresses) or AF_INET6 (16 bytes); ports
/// in host order. Returns the uid (>= 0), or -errno: -ENOENT when this network namespace has no such
/// socket, -EPROTONOSUPPORT/-EAFNOSUPPORT/-EACCES when sock_diag is unavailable here.
long sp_tcp_socket_owner(int family, const unsigned char *local, unsigned short local_port,
                         const unsigned char *remote, unsigned short remote_port);

#endif
