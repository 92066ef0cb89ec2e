#ifndef SCOPEPROXY_SOCKET_DIAG_H
#define SCOPEPROXY_SOCKET_DIAG_H

/// What the kernel said about one socket: its owner's uid, its inode (0 for a socket no process
/// holds any more: an orphan or a TIME_WAIT entry, whose uid the kernel reports as 0) and its TCP
/// state. The caller decides whether that vouches for an owner (`SocketOwnerTable.liveOwner`).
struct sp_socket_owner_answer {
    unsigned int uid;
    unsigned long long inode;
    unsigned char state;
};

/// Asks the kernel about the TCP socket whose local end is (local, local_port) and whose remote end
/// is (remote, remote_port), for that one socket (NETLINK_SOCK_DIAG, what `ss` uses): no table is
/// read. `family` is AF_INET (4-byte addresses) or AF_INET6 (16 bytes); ports in host order;
/// `states`: the `idiag_states` bit mask (1 << TCP state) of the states to find it in. Returns 0
/// with `answer` filled, or -errno: -ENOENT when this network namespace has no such socket in those
/// states, -EPROTONOSUPPORT/-EAFNOSUPPORT/-EACCES when sock_diag is unavailable here.
int sp_tcp_socket_owner(int family, const unsigned char *local, unsigned short local_port,
                        const unsigned char *remote, unsigned short remote_port, unsigned int states,
                        struct sp_socket_owner_answer *answer);

#endif
